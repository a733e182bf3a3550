// A small PromQL evaluator for the tests of the shipped alert rules (deploy/prometheus/alerts.yml):
// whether a rule's expression would return series (fire, once its `for` has passed) over two
// scrapes of /metrics taken some seconds apart, without running Prometheus. It knows the subset
// the rules use: selectors with `label="value"`, `!=` and `=~` matchers, `sum(...)`, `rate(x[range])` (the
// increase between the two scrapes per second; the range itself is not checked), `+ - * /`,
// comparisons without `bool` (they filter), `and`, `or`, numbers and parentheses. Anything else
// throws, so a rule written beyond it is noticed rather than judged wrongly.

export interface Series {
  labels: Record<string, string>;
  value: number;
}
type Value = number | Series[];
type Matcher = [label: string, test: (value: string) => boolean];

/** A scrape's samples: name -> series. */
export type Samples = Map<string, Series[]>;

export function parseScrape(text: string): Samples {
  const out: Samples = new Map();
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const m = /^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!m) throw new Error(`unreadable sample: ${line}`);
    const labels: Record<string, string> = {};
    for (const l of (m[2] ?? '').matchAll(/([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]!] = l[2]!;
    const list = out.get(m[1]!) ?? [];
    list.push({ labels, value: Number(m[3]) });
    out.set(m[1]!, list);
  }
  return out;
}

/**
 * The series `expr` returns at `now`, with `before` the scrape taken `seconds` earlier (for
 * `rate`). An empty list: the rule would not fire.
 */
export function evaluate(expr: string, before: Samples, now: Samples, seconds: number): Series[] {
  const tokens = [
    ...expr.matchAll(/\s*([A-Za-z_:][A-Za-z0-9_:]*|\d+(?:\.\d+)?(?:e[+-]?\d+)?|==|!=|=~|>=|<=|[-+*/(){}[\],><=]|"(?:[^"\\]|\\.)*")/gy),
  ];
  if (
    tokens
      .map((t) => t[0])
      .join('')
      .replace(/\s/g, '') !== expr.replace(/\s/g, '')
  )
    throw new Error(`cannot read: ${expr}`);
  const words = tokens.map((t) => t[1]!);
  let i = 0;
  const peek = () => words[i];
  const take = (want?: string) => {
    const w = words[i++];
    if (w === undefined || (want !== undefined && w !== want)) throw new Error(`expected ${want ?? 'more'} at ${i} in: ${expr}`);
    return w;
  };

  const key = (labels: Record<string, string>) =>
    JSON.stringify(
      Object.entries(labels)
        .filter(([k]) => k !== '__name__')
        .sort(),
    );
  const selector = (name: string, samples: Samples, matchers: Matcher[]) =>
    (samples.get(name) ?? []).filter((s) => matchers.every(([k, test]) => test(s.labels[k] ?? '')));

  // Vector op vector: one-to-one on identical label sets; with a number, each series.
  const binary = (a: Value, b: Value, fn: (x: number, y: number) => number | undefined): Value => {
    if (typeof a === 'number' && typeof b === 'number') return fn(a, b) ?? NaN;
    const pairs: Array<[Series, number]> =
      typeof b === 'number'
        ? (a as Series[]).map((s) => [s, b])
        : typeof a === 'number'
          ? b.map((s) => [s, a])
          : a.flatMap((s) => {
              const other = b.find((o) => key(o.labels) === key(s.labels));
              return other ? [[s, other.value] as [Series, number]] : [];
            });
    const swapped = typeof a === 'number';
    return pairs.flatMap(([s, x]) => {
      const v = swapped ? fn(x, s.value) : fn(s.value, x);
      return v === undefined ? [] : [{ labels: s.labels, value: v }];
    });
  };
  const compare = (a: Value, b: Value, test: (x: number, y: number) => boolean): Value => {
    if (typeof a === 'number' && typeof b === 'number') throw new Error('a comparison of two numbers needs bool');
    const leftIsSeries = typeof a !== 'number';
    return binary(a, b, (x, y) => (test(x, y) ? (leftIsSeries ? x : y) : undefined));
  };
  const series = (v: Value): Series[] => {
    if (typeof v === 'number') throw new Error(`and/or need series: ${expr}`);
    return v;
  };

  function primary(): Value {
    const w = take();
    if (w === '(') {
      const v = orExpr();
      take(')');
      return v;
    }
    if (/^\d/.test(w)) return Number(w);
    if (w === 'sum') {
      take('(');
      const v = series(orExpr());
      take(')');
      return v.length === 0 ? [] : [{ labels: {}, value: v.reduce((s, x) => s + x.value, 0) }];
    }
    if (w === 'rate') {
      take('(');
      const name = take();
      const matchers = labelMatchers();
      take('[');
      while (peek() !== ']') take();
      take(']');
      take(')');
      return selector(name, now, matchers).flatMap((s) => {
        const old = selector(name, before, matchers).find((o) => key(o.labels) === key(s.labels));
        return old ? [{ labels: s.labels, value: Math.max(0, s.value - old.value) / seconds }] : [];
      });
    }
    if (!/^[A-Za-z_:]/.test(w) || peek() === '(') throw new Error(`not supported: ${w} in: ${expr}`);
    return selector(w, now, labelMatchers());
  }
  function labelMatchers(): Matcher[] {
    const out: Matcher[] = [];
    if (peek() !== '{') return out;
    take('{');
    while (peek() !== '}') {
      const label = take();
      const op = take();
      const value = JSON.parse(take()) as string;
      if (op === '=') out.push([label, (v) => v === value]);
      else if (op === '!=') out.push([label, (v) => v !== value]);
      else if (op === '=~') out.push([label, (v) => new RegExp(`^(?:${value})$`).test(v)]);
      else throw new Error(`not supported: ${op} in: ${expr}`);
      if (peek() === ',') take(',');
    }
    take('}');
    return out;
  }
  function product(): Value {
    let v = primary();
    while (peek() === '*' || peek() === '/') {
      const op = take();
      const r = primary();
      v = binary(v, r, op === '*' ? (x, y) => x * y : (x, y) => x / y);
    }
    return v;
  }
  function sumExpr(): Value {
    let v = product();
    while (peek() === '+' || peek() === '-') {
      const op = take();
      const r = product();
      v = binary(v, r, op === '+' ? (x, y) => x + y : (x, y) => x - y);
    }
    return v;
  }
  const TESTS: Record<string, (x: number, y: number) => boolean> = {
    '==': (x, y) => x === y,
    '!=': (x, y) => x !== y,
    '>': (x, y) => x > y,
    '<': (x, y) => x < y,
    '>=': (x, y) => x >= y,
    '<=': (x, y) => x <= y,
  };
  function comparison(): Value {
    let v = sumExpr();
    while (peek() !== undefined && peek()! in TESTS) {
      const test = TESTS[take()]!;
      v = compare(v, sumExpr(), test);
    }
    return v;
  }
  function andExpr(): Value {
    let v = comparison();
    while (peek() === 'and') {
      take();
      const right = series(comparison()).map((s) => key(s.labels));
      v = series(v).filter((s) => right.includes(key(s.labels)));
    }
    return v;
  }
  function orExpr(): Value {
    let v = andExpr();
    while (peek() === 'or') {
      take();
      const left = series(v);
      const keys = left.map((s) => key(s.labels));
      v = [...left, ...series(andExpr()).filter((s) => !keys.includes(key(s.labels)))];
    }
    return v;
  }

  const result = orExpr();
  if (i !== words.length) throw new Error(`not read to its end: ${expr}`);
  return series(result);
}
