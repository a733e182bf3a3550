// Aggregate history SQL: one series' rows in [dateFrom, dateTo] grouped into buckets
// (src/history/buckets.ts). Two statements per attribute: first the range and how many buckets
// it spans (computed, never generated, so a request over too many buckets is refused before any
// row is read), then the buckets. Both are sent unnamed with the bounds as parameters, so each is
// planned with its bounds and reads only the chunks (partitions) of its range, on both layouts.
// Sums and averages are computed in `numeric` from the stored text: exact, so the answer does not
// depend on the order rows are read in (a float sum would), and the same on both layouts.
import type pg from 'pg';
import { bucketTimeSql, historyTimeSql, microsToText } from '../time.js';
import { horizonOf } from './horizon.js';
import { bucketSql, NUMERIC_AGGREGATES, type Aggregate, type Bucketing } from './buckets.js';
import { seriesKey } from './series.js';

export interface SeriesRef {
  tenant: string;
  id: string;
  label: string;
}

export interface Range {
  /** Bounds as timestamptz text; undefined: the series' first / last row. */
  from: string | undefined;
  to: string | undefined;
}

/** What to compute per bucket: the bucketing (a calendar one with its zone as PostgreSQL spells it), the aggregates, and whether empty buckets are written. */
export interface BucketAsk {
  bucketing: Bucketing;
  aggs: Aggregate[];
  fill: boolean;
}

/** A series' range to aggregate and its bucket count; `empty`: no row and no bound to start from. */
export type Span = { empty: true } | { empty: false; lo: string; hi: string; buckets: number };

/** The rows of one series (parameters $1..$4) within the bounds $5 / $6 as present. */
function seriesRows(r: Range): { sql: string; values: (p: SeriesRef) => string[]; bounds: string[] } {
  let sql = `FROM history WHERE series = $1::bigint AND tenant = $2 AND device_id = $3 AND attr = $4`;
  const bounds: string[] = [];
  if (r.from !== undefined) {
    bounds.push(r.from);
    sql += ` AND ts >= $${4 + bounds.length}::timestamptz`;
  }
  if (r.to !== undefined) {
    bounds.push(r.to);
    sql += ` AND ts <= $${4 + bounds.length}::timestamptz`;
  }
  return { sql, bounds, values: (p) => [seriesKey(p.tenant, p.id, p.label), p.tenant, p.id, p.label, ...bounds] };
}

/** The range to aggregate (a missing bound: the series' first or last row) and its bucket count. */
export async function spanOf(pool: pg.Pool, s: SeriesRef, r: Range, b: Bucketing): Promise<Span> {
  const z = b.kind === 'calendar' ? [b.tz] : [];
  let text: string;
  let values: string[];
  if (r.from !== undefined && r.to !== undefined) {
    // Both bounds: arithmetic only, no row read.
    text = `SELECT $1::timestamptz AS lo, $2::timestamptz AS hi`;
    values = [r.from, r.to, ...z];
  } else {
    const rows = seriesRows(r);
    const lo = r.from !== undefined ? '$5::timestamptz' : `(SELECT min(ts) ${rows.sql})`;
    const hi = r.to !== undefined ? `$${4 + rows.bounds.length}::timestamptz` : `(SELECT max(ts) ${rows.sql})`;
    text = `SELECT ${lo} AS lo, ${hi} AS hi`;
    values = [...rows.values(s), ...z];
  }
  const sql = bucketSql(b, `$${values.length}::text`);
  const { rows: out } = await pool.query<{ lo: string | null; hi: string | null; n: string | null }>({
    // A range whose dateFrom is after its dateTo holds no time, hence no bucket (not even the one
    // both bounds fall in, which fill=null would otherwise answer empty).
    text: `SELECT ${historyTimeSql('lo')} AS lo, ${historyTimeSql('hi')} AS hi, CASE WHEN lo > hi THEN 0 ELSE ${sql.count('lo', 'hi')} END AS n FROM (${text}) s`,
    values,
  });
  const row = out[0]!;
  if (row.lo === null || row.hi === null || row.n === null) return { empty: true };
  return { empty: false, lo: row.lo, hi: row.hi, buckets: Math.max(0, Number(row.n)) };
}

/**
 * A stored value as a number, null when it is none; the same as history_number() of the rollups
 * (sql/190_history_number_within_numeric.sql): more than 1,000 characters or an exponent of five
 * digits or more may be beyond `numeric` (it answered 500 before, found by an audit).
 */
const NUMBER = `CASE WHEN value ~ '^-?[0-9]' AND length(value) <= 1000 AND value !~ '[eE][+-]?0*[1-9][0-9]{4}' THEN value::numeric END`;

/**
 * An exact (numeric) average or sum as the nearest double: 0 when that is 0, |x| <= 2^-1075
 * (half the smallest double, 5e-324), which PostgreSQL's float8 cast refuses as out of range
 * instead (found by an audit: the average of 5e-324, 0 and 0 answered 500).
 */
const asDouble = (x: string) => `(CASE WHEN abs(${x}) * 2::numeric ^ 1075 <= 1 THEN 0 ELSE (${x})::float8 END)`;

/**
 * An exact (numeric) sum as a double, or NULL past a double's range: two stored values of
 * 1.7e308 sum to more than any double (or JSON number a client can read) holds.
 */
const sumAsDouble = (sum: string) => `(CASE WHEN abs(${sum}) <= 1.7976931348623157e308 THEN ${asDouble(sum)} END)`;

/**
 * An average (an exact numeric sum over a count) as the nearest double. `avg(numeric)` and a
 * plain numeric division keep only about 16 significant digits, and that decimal rounded again
 * to a double may miss the nearest one by one unit in the last place (found by an audit: the
 * average of 0.01, 0 and 0 answered 0.003333333333333333, not 0.0033333333333333335). The mean
 * of values with d decimals over n rows lies at least 1 / (10^d * n * 2^k) from any midpoint
 * between doubles of its size (2^-k apart) that it is not, and k is at most about d + log10 n
 * digits' worth past 16; the quotient to 2d + 60 decimal places (n below 10^18) is nearer than
 * that, so its double is the exact average's. (2d + 60 is at most ~760: within PostgreSQL's 1,000.)
 */
const avgAsDouble = (sum: string, n: string) => asDouble(`round(${sum}, 2 * scale(${sum}) + 60) / nullif(${n}, 0)`);

const AGG_SQL: Record<Aggregate, string> = {
  avg: avgAsDouble('sum(num)', 'count(num)'),
  min: `min(num)::float8`,
  max: `max(num)::float8`,
  sum: sumAsDouble('sum(num)'),
  count: `count(*)`,
  // Ties at the same time: the smaller / larger text, byte by byte (COLLATE "C": not the
  // database's collation, which may differ between databases), so every database and both
  // layouts pick the same row.
  first: `(array_agg(value ORDER BY ts, value COLLATE "C"))[1]`,
  last: `(array_agg(value ORDER BY ts DESC, value COLLATE "C" DESC))[1]`,
};

/** A bucket as read: its start (UTC text) and each aggregate asked, as text (null: none). */
export type BucketRow = { ts: string } & Partial<Record<Aggregate, string | null>>;

/** The aggregates the hourly rollups hold (first and last need the rows). */
const ROLLUP_AGGREGATES: ReadonlySet<Aggregate> = new Set(['avg', 'min', 'max', 'sum', 'count']);

/** Combining partial aggregates (rollups and rows alike: n, nn, total, lo, hi) exactly as AGG_SQL combines rows. */
const MERGE_SQL: Partial<Record<Aggregate, string>> = {
  // The same quotient as from the rows (avgAsDouble), so both give the same digits.
  avg: avgAsDouble('sum(total)', 'sum(nn)'),
  min: `min(lo)::float8`,
  max: `max(hi)::float8`,
  sum: sumAsDouble('sum(total)'),
  count: `sum(n)::int8`,
};

const HOUR = `interval '1 hour'`;
const hourOf = (ts: string) => `date_bin(${HOUR}, ${ts}, timestamptz 'epoch')`;

/**
 * The whole hours of the span the rollups may answer (sql/070_history_rollup.sql): from the
 * first hour starting at or after `lo` to the last ending at or before `hi`, and before
 * rolled_before; undefined when there is none, or when a bucket starts inside an hour (calendar
 * units in a zone whose offset is not whole hours).
 */
async function rolledHours(
  pool: pg.Pool,
  span: { lo: string; hi: string },
  b: Bucketing,
): Promise<{ from: string; to: string } | undefined> {
  const sql = bucketSql(b, '$4::text');
  // Not before the oldest chunk there is, nor TimescaleDB's retention cut (none: no hour at
  // all): its retention drops chunks on its own schedule, and the rollups of their hours are
  // forgotten only by the next maintenance pass. Hours left out are read from the rows, so an
  // old value here is safe.
  const { rollupsFromUs } = await horizonOf(pool);
  const oldest = rollupsFromUs === undefined ? 'infinity' : microsToText(rollupsFromUs);
  const L = hourOf(`greatest($1::timestamptz, $3::timestamptz) + ${HOUR} - interval '1 microsecond'`);
  const R = `least(${hourOf(`$2::timestamptz + interval '1 microsecond'`)}, (SELECT rolled_before FROM history_settings))`;
  const aligned =
    b.kind === 'fixed'
      ? 'true'
      : `NOT EXISTS (SELECT 1 FROM ${sql.series('h.l', 'h.r')} AS g(k) WHERE ${hourOf(sql.start('g.k'))} <> ${sql.start('g.k')})`;
  const { rows } = await pool.query<{ l: string; r: string; usable: boolean }>({
    text: `SELECT h.l::text AS l, h.r::text AS r, h.l < h.r AND ${aligned} AS usable FROM (SELECT ${L} AS l, ${R} AS r) h`,
    values: [span.lo, span.hi, oldest, ...(b.kind === 'calendar' ? [b.tz] : [])],
  });
  const row = rows[0]!;
  return row.usable ? { from: row.l, to: row.r } : undefined;
}

/**
 * The bucket rows (`k` and the aggregates asked) from the hourly rollups of [$7, $8) that are
 * not marked stale, and from the rows everywhere else: the span's partial first and last
 * hours, the hours from rolled_before on, the marked hours. One statement, so one snapshot of
 * rollups, marks and rows. Parameters: $1..$4 the series, $5 / $6 the span, $7 / $8 the rolled
 * hours, then the zone.
 */
function rolledBucketsSql(key: (ts: string) => string, aggs: Aggregate[]): string {
  const series = `series = $1::bigint AND tenant = $2 AND device_id = $3 AND attr = $4`;
  return `SELECT k, ${aggs.map((a) => `${MERGE_SQL[a]} AS ${a}`).join(', ')}
            FROM (SELECT ${key('r.hour')} AS k, r.n, r.nn, r.total, r.lo, r.hi
                    FROM history_rollup r
                   WHERE r.${series.replaceAll(' AND ', ' AND r.')} AND r.hour >= $7::timestamptz AND r.hour < $8::timestamptz
                     AND NOT EXISTS (SELECT 1 FROM history_rollup_dirty d WHERE d.series = r.series AND d.hour = r.hour)
                  UNION ALL
                  SELECT ${key('x.ts')}, 1, (x.num IS NOT NULL)::int, x.num, x.num, x.num
                    FROM (SELECT ts, ${NUMBER} AS num FROM history WHERE ${series} AND ts >= $5::timestamptz AND ts < $7::timestamptz
                          UNION ALL
                          SELECT ts, ${NUMBER} AS num FROM history WHERE ${series} AND ts >= $8::timestamptz AND ts <= $6::timestamptz
                          UNION ALL
                          SELECT h.ts, ${NUMBER.replaceAll('value', 'h.value')} AS num
                            FROM history_rollup_dirty d
                            JOIN LATERAL (SELECT ts, value FROM history
                                           WHERE ${series} AND ts >= d.hour AND ts < d.hour + ${HOUR}
                                             AND ts >= $7::timestamptz AND ts < $8::timestamptz) h ON true
                           WHERE d.series = $1::bigint AND d.hour >= $7::timestamptz AND d.hour < $8::timestamptz) x) p
           GROUP BY k`;
}

/**
 * The buckets of one series in time order, over the span `lo`..`hi` (their bounds also bound the
 * rows); `fill`: every bucket of the span, empty ones with null aggregates (count 0). Whole
 * hours come from the hourly rollups where they can (every aggregate asked is one they hold,
 * and every bucket is whole hours); the answer is the same either way.
 */
export async function readBuckets(pool: pg.Pool, s: SeriesRef, span: { lo: string; hi: string }, ask: BucketAsk): Promise<BucketRow[]> {
  const { bucketing: b, aggs, fill } = ask;
  const rows = seriesRows({ from: span.lo, to: span.hi });
  const z = b.kind === 'calendar' ? [b.tz] : [];
  const rollable = aggs.every((a) => ROLLUP_AGGREGATES.has(a)) && (b.kind === 'calendar' || b.seconds % 3600 === 0);
  const hours = rollable ? await rolledHours(pool, span, b) : undefined;
  const zParam = `$${hours ? 9 : 7}::text`;
  const sql = bucketSql(b, zParam);
  const needsNumber = aggs.some((a) => NUMERIC_AGGREGATES.has(a));
  const buckets = hours
    ? rolledBucketsSql(sql.key, aggs)
    : `SELECT ${sql.key('ts')} AS k, ${aggs.map((a) => `${AGG_SQL[a]} AS ${a}`).join(', ')}
         FROM (SELECT ts, value${needsNumber ? `, ${NUMBER} AS num` : ''} ${rows.sql}) r
        GROUP BY 1`;
  // Output as text: count as an integer, numbers in float8's shortest form, first/last the stored JSON.
  const cols = aggs.map((a) => (fill && a === 'count' ? `coalesce(b.count, 0)::text AS count` : `b.${a}::text AS ${a}`)).join(', ');
  const from = fill ? `${sql.series('$5::timestamptz', '$6::timestamptz')} AS g(k) LEFT JOIN b ON b.k = g.k` : 'b';
  const k = fill ? 'g.k' : 'b.k';
  const text = `WITH b AS (${buckets})
                SELECT ${bucketTimeSql(sql.start(k))} AS ts, ${cols}
                  FROM ${from}
                 ORDER BY ${k}`;
  const values = [...rows.values(s), ...(hours ? [hours.from, hours.to] : []), ...z];
  const { rows: out } = await pool.query<BucketRow>({ text, values });
  return out;
}
