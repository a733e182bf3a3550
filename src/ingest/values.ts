// Value rules of device messages (decisions.md "Device messages (MQTT)"): a value must fit its
// attribute's value_type, and is stored as JSON text. A converter returns the JSON text to
// store, or undefined when the value does not fit (the value is dropped as `wrong_type`).

export type Converter = (value: unknown) => string | undefined;

const NUMERIC = /^\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*$/;
const GEOPOINT = /^\s*([+-]?\d+(?:\.\d+)?)\s*,\s*([+-]?\d+(?:\.\d+)?)\s*$/;

function toNumber(value: unknown): number | undefined {
  if (typeof value === 'number') return Number.isFinite(value) ? value : undefined;
  if (typeof value === 'string' && NUMERIC.test(value)) {
    const n = Number(value);
    return Number.isFinite(n) ? n : undefined;
  }
  return undefined;
}

const float: Converter = (v) => {
  const n = toNumber(v);
  return n === undefined ? undefined : String(n);
};

const integer: Converter = (v) => {
  const n = toNumber(v);
  return n === undefined || !Number.isInteger(n) ? undefined : String(n);
};

const bool: Converter = (v) => (typeof v === 'boolean' ? (v ? 'true' : 'false') : undefined);

const string: Converter = (v) => (typeof v === 'string' ? JSON.stringify(v) : undefined);

const geopoint: Converter = (v) => {
  if (typeof v !== 'string') return undefined;
  const m = GEOPOINT.exec(v);
  if (!m) return undefined;
  const lat = Number(m[1]);
  const lon = Number(m[2]);
  if (Math.abs(lat) > 90 || Math.abs(lon) > 180) return undefined;
  return JSON.stringify(v);
};

/** Whether `v` holds a number beyond a double (JSON.parse reads `1e400` as Infinity). */
function holdsNonFinite(v: unknown): boolean {
  let found = false;
  JSON.stringify(v, (_key, value: unknown) => {
    if (typeof value === 'number' && !Number.isFinite(value)) found = true;
    return value;
  });
  return found;
}

/** Values nested deeper than this do not fit (docs/messaging.md §1; PostgreSQL's `value::jsonb` reads ~13,000 levels). */
export const MAX_VALUE_DEPTH = 10_000;
/** Nested up to this depth, a value is written by JSON.stringify (fast); deeper, by writeDeep. */
const SHALLOW_DEPTH = 64;

/** Whether `v` nests containers deeper than `limit` (without recursion; stops once it knows). */
function deeperThan(v: unknown, limit: number): boolean {
  const stack: Array<[unknown, number]> = [[v, 0]];
  while (stack.length > 0) {
    const [x, depth] = stack.pop()!;
    if (x === null || typeof x !== 'object') continue;
    if (depth + 1 > limit) return true;
    for (const child of Array.isArray(x) ? x : Object.values(x))
      if (child !== null && typeof child === 'object') stack.push([child, depth + 1]);
  }
  return false;
}

/**
 * JSON.stringify without recursion, in time linear in the size: JSON.stringify's time grows with
 * the square of the depth (~50 ms for 12,000 levels, ~80 ms to fail past its stack at ~16,000,
 * which held a shard: found by an audit). Undefined when a number is beyond a double or the
 * value nests deeper than MAX_VALUE_DEPTH. The same text as JSON.stringify for parsed JSON.
 */
function writeDeep(root: unknown): string | undefined {
  const out: string[] = [];
  const stack: Array<{ v: object; keys: string[] | undefined; i: number }> = [];
  const open = (v: unknown, inArray: boolean): boolean => {
    if (v === undefined) {
      if (inArray) out.push('null');
      return true;
    }
    if (typeof v === 'number' && !Number.isFinite(v)) return false;
    if (v === null || typeof v !== 'object') {
      out.push(JSON.stringify(v));
      return true;
    }
    if (stack.length >= MAX_VALUE_DEPTH) return false;
    const array = Array.isArray(v);
    out.push(array ? '[' : '{');
    stack.push({ v, keys: array ? undefined : Object.keys(v), i: 0 });
    return true;
  };
  if (!open(root, false)) return undefined;
  while (stack.length > 0) {
    const f = stack[stack.length - 1]!;
    if (f.keys === undefined) {
      const a = f.v as unknown[];
      if (f.i === a.length) {
        out.push(']');
        stack.pop();
        continue;
      }
      if (f.i > 0) out.push(',');
      if (!open(a[f.i++], true)) return undefined;
    } else {
      if (f.i === f.keys.length) {
        out.push('}');
        stack.pop();
        continue;
      }
      const key = f.keys[f.i++]!;
      const value = (f.v as Record<string, unknown>)[key];
      if (value === undefined) continue;
      // (a comma unless this is the first member written)
      if (out[out.length - 1] !== '{') out.push(',');
      out.push(JSON.stringify(key), ':');
      if (!open(value, false)) return undefined;
    }
  }
  return out.join('');
}

const anyJson: Converter = (v) => {
  if (v !== null && typeof v === 'object' && deeperThan(v, SHALLOW_DEPTH)) return writeDeep(v);
  try {
    const text = JSON.stringify(v);
    // JSON.stringify writes Infinity as null: a number beyond a double would be stored as null,
    // not as what the device sent, so it does not fit. Only text with a null can hold one.
    if (text.includes('null') && holdsNonFinite(v)) return undefined;
    return text;
  } catch {
    return undefined; // nested deeper than the stack allows (JSON.parse took it, stringify cannot)
  }
};

const CONVERTERS: Record<string, Converter> = { float, integer, bool, string, geopoint };

/** The converter of a value_type; types without a rule take any JSON value. */
export function converterFor(valueType: string): Converter {
  return CONVERTERS[valueType] ?? anyJson;
}
