// The time buckets of an aggregate history read (`interval`, `tz`): what the parameters mean and
// the SQL that puts a row in its bucket. Two kinds, and the same SQL on both storage layouts
// (plain PostgreSQL and TimescaleDB), so both answer the same buckets:
//   * fixed lengths (`30s`, `15m`, `1h`, any positive multiple of s, m or h up to a week): buckets
//     of that many seconds counted from the Unix epoch (`date_bin`), whatever `tz` is;
//   * calendar units (`1d`, `1w`, `1M`): local days, ISO weeks (from Monday) and months of `tz`
//     (default UTC), each starting at local midnight; across a DST change a day is 23 or 25 hours.
//     They are grouped by the local time truncated (`date_trunc(unit, ts AT TIME ZONE tz)`) and
//     that local time turned back into an instant, the same way for rows and for the empty
//     buckets `fill=null` adds, so both agree on every bucket's start.

/** `30s`, `15m`, `1h`, `1d`, `1w`, `1M`: a positive count and a unit (calendar units: count 1). */
export const INTERVAL_PATTERN = '^([1-9][0-9]{0,5}[smh]|1[dwM])$';
const MAX_FIXED_SECONDS = 7 * 86_400;

export type Bucketing =
  { kind: 'fixed'; seconds: number; text: string } | { kind: 'calendar'; unit: 'day' | 'week' | 'month'; tz: string; text: string };

const FIXED_UNIT_SECONDS: Record<string, number> = { s: 1, m: 60, h: 3600 };
const CALENDAR_UNIT: Record<string, 'day' | 'week' | 'month'> = { d: 'day', w: 'week', M: 'month' };

/** The bucketing of a valid `interval` (INTERVAL_PATTERN), or a reason it cannot be used. */
export function bucketingOf(interval: string, tz: string): Bucketing | string {
  const unit = interval.slice(-1);
  const count = Number(interval.slice(0, -1));
  const calendar = CALENDAR_UNIT[unit];
  if (calendar) return { kind: 'calendar', unit: calendar, tz, text: interval };
  const seconds = count * FIXED_UNIT_SECONDS[unit]!;
  if (seconds > MAX_FIXED_SECONDS) return `interval must be at most one week (168h), got "${interval}"`;
  return { kind: 'fixed', seconds, text: interval };
}

/**
 * An IANA zone name as written (`Europe/Berlin`, `UTC`, `America/Argentina/Buenos_Aires`): not a
 * POSIX string or an offset, which PostgreSQL would also take but with its sign reversed. Node
 * and PostgreSQL must both know it (Node here, PostgreSQL when the query runs: `unknownZone`).
 */
export function isZoneName(tz: string): boolean {
  if (!/^[A-Za-z][A-Za-z0-9_+-]*(\/[A-Za-z0-9_+-]+){0,2}$/.test(tz) || /^(GMT|UTC)[+-]/i.test(tz)) return false;
  try {
    new Intl.DateTimeFormat('en', { timeZone: tz });
    return true;
  } catch {
    return false;
  }
}

/** PostgreSQL's error for a zone it does not know (SQLSTATE 22023 with this text). */
export const unknownZone = (err: unknown) =>
  err instanceof Error && (err as { code?: string }).code === '22023' && /time zone .* not recognized/.test(err.message);

/**
 * SQL fragments of a bucketing; `$z` is the parameter holding the zone (calendar units).
 * `key(ts)`: the bucket of a time, as the grouping key; `start(key)`: the bucket's start as an
 * instant; `series(lo, hi)`: every bucket key from lo's bucket to hi's (for fill=null);
 * `count(lo, hi)`: how many buckets that is (computed, not generated: a bad request may ask for
 * millions).
 */
export function bucketSql(b: Bucketing, z: string) {
  if (b.kind === 'fixed') {
    const iv = `interval '${b.seconds} seconds'`;
    const bin = (ts: string) => `date_bin(${iv}, ${ts}, timestamptz 'epoch')`;
    return {
      key: bin,
      start: (key: string) => key,
      series: (lo: string, hi: string) => `generate_series(${bin(lo)}, ${hi}, ${iv})`,
      count: (lo: string, hi: string) =>
        `(floor(extract(epoch FROM ${hi}) / ${b.seconds}) - floor(extract(epoch FROM ${lo}) / ${b.seconds}) + 1)::int8`,
    };
  }
  const local = (ts: string) => `date_trunc('${b.unit}', ${ts} AT TIME ZONE ${z})`;
  const step = `interval '1 ${b.unit}'`;
  const count =
    b.unit === 'month'
      ? // The months between the two (age of two month starts: whole years and months). Not
        // year * 12 + month of each: PostgreSQL numbers 1 BC as year -1, with no year 0, so a
        // range from 1 BC into AD 1 was counted 12 months too long (found by an audit).
        (lo: string, hi: string) => {
          const age = `age(${local(hi)}, ${local(lo)})`;
          return `(extract(year FROM ${age}) * 12 + extract(month FROM ${age}) + 1)::int8`;
        }
      : (lo: string, hi: string) => `((${local(hi)}::date - ${local(lo)}::date) / ${b.unit === 'week' ? 7 : 1} + 1)::int8`;
  // A bucket starts at the first instant whose local time is its key. PostgreSQL reads a local
  // time that happens twice (clocks going back at midnight, as in America/Havana) as the later
  // instant: the earlier one is the key read with the offset in force three hours before that,
  // when it maps back to the key.
  const later = (key: string) => `(${key} AT TIME ZONE ${z})`;
  const before = (key: string) => `(${later(key)} - interval '3 hours')`;
  const earlier = (key: string) => `((${key} - (${before(key)} AT TIME ZONE ${z} - ${before(key)} AT TIME ZONE 'UTC')) AT TIME ZONE 'UTC')`;
  const start = (key: string) =>
    `(SELECT CASE WHEN e < l AND e AT TIME ZONE ${z} = ${key} THEN e ELSE l END FROM (SELECT ${later(key)} AS l, ${earlier(key)} AS e) t)`;
  return {
    key: local,
    start,
    // A local day that never happened (Pacific/Apia skipped 30 December 2011, going from -10 to
    // +14 at midnight) has no instant: its key read back is the next day's start, and no local
    // time truncates to it. Such keys are left out, else fill=null answered an empty bucket at
    // the next day's start before that day's own.
    series: (lo: string, hi: string) =>
      `(SELECT s.k FROM generate_series(${local(lo)}, ${local(hi)}, ${step}) AS s(k) WHERE ${local(start('s.k'))} = s.k)`,
    count,
  };
}

/** The aggregates, in the order a bucket shows them. */
const AGGREGATES = ['avg', 'min', 'max', 'sum', 'count', 'first', 'last'] as const;
export type Aggregate = (typeof AGGREGATES)[number];
/** The aggregates as the error texts list them: `avg, min, …, last`. */
export const AGGREGATE_LIST = AGGREGATES.join(', ');
const AGG_NAME = `(${AGGREGATES.join('|')})`;
/** One `agg` value: aggregates separated by commas (blanks around them allowed). */
export const AGG_LIST_PATTERN = `^\\s*${AGG_NAME}(\\s*,\\s*${AGG_NAME})*\\s*$`;
/** Those that need numbers (attributes of value_type float or integer). */
export const NUMERIC_AGGREGATES: ReadonlySet<Aggregate> = new Set(['avg', 'min', 'max', 'sum']);
export const NUMERIC_VALUE_TYPES: ReadonlySet<string> = new Set(['float', 'integer']);

/** `agg` as written (comma-separated or repeated): the aggregates in AGGREGATES order, or the first unknown one. */
export function aggregatesOf(values: string[]): { aggs: Aggregate[] } | { unknown: string } {
  const asked = new Set<string>();
  for (const v of values)
    for (const part of v.split(',')) {
      const a = part.trim();
      if (a === '') continue;
      if (!(AGGREGATES as readonly string[]).includes(a)) return { unknown: a };
      asked.add(a);
    }
  return { aggs: AGGREGATES.filter((a) => asked.has(a)) };
}
