// Aggregate history SQL: one series' rows in [dateFrom, dateTo] grouped into buckets
// (src/history/buckets.ts). Two statements per attribute: first the range and how many buckets
// it spans (computed, never generated, so a request over too many buckets is refused before any
// row is read), then the buckets. Both are sent unnamed with the bounds as parameters, so each is
// planned with its bounds and reads only the chunks (partitions) of its range, on both layouts.
// Sums and averages are computed in `numeric` from the stored text: exact, so the answer does not
// depend on the order rows are read in (a float sum would), and the same on both layouts.
import type pg from 'pg';
import { historyTimeSql } from '../time.js';
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
    text: `SELECT ${historyTimeSql('lo')} AS lo, ${historyTimeSql('hi')} AS hi, ${sql.count('lo', 'hi')} AS n FROM (${text}) s`,
    values,
  });
  const row = out[0]!;
  if (row.lo === null || row.hi === null || row.n === null) return { empty: true };
  return { empty: false, lo: row.lo, hi: row.hi, buckets: Math.max(0, Number(row.n)) };
}

const NUMBER = `CASE WHEN value ~ '^-?[0-9]' THEN value::numeric END`;

const AGG_SQL: Record<Aggregate, string> = {
  avg: `avg(num)::float8`,
  min: `min(num)::float8`,
  max: `max(num)::float8`,
  sum: `sum(num)::float8`,
  count: `count(*)`,
  // Ties at the same time: the smaller / larger text, so both layouts pick the same row.
  first: `(array_agg(value ORDER BY ts, value))[1]`,
  last: `(array_agg(value ORDER BY ts DESC, value DESC))[1]`,
};

/** A bucket as read: its start (UTC text) and each aggregate asked, as text (null: none). */
export type BucketRow = { ts: string } & Partial<Record<Aggregate, string | null>>;

/**
 * The buckets of one series in time order, over the span `lo`..`hi` (their bounds also bound the
 * rows); `fill`: every bucket of the span, empty ones with null aggregates (count 0).
 */
export async function readBuckets(
  pool: pg.Pool,
  s: SeriesRef,
  span: { lo: string; hi: string },
  b: Bucketing,
  aggs: Aggregate[],
  fill: boolean,
): Promise<BucketRow[]> {
  const rows = seriesRows({ from: span.lo, to: span.hi });
  const sql = bucketSql(b, '$7::text');
  const needsNumber = aggs.some((a) => NUMERIC_AGGREGATES.has(a));
  // Output as text: count as an integer, numbers in float8's shortest form, first/last the stored JSON.
  const cols = aggs.map((a) => (fill && a === 'count' ? `coalesce(b.count, 0)::text AS count` : `b.${a}::text AS ${a}`)).join(', ');
  const from = fill ? `${sql.series('$5::timestamptz', '$6::timestamptz')} AS g(k) LEFT JOIN b ON b.k = g.k` : 'b';
  const k = fill ? 'g.k' : 'b.k';
  const z = b.kind === 'calendar' ? [b.tz] : [];
  const text = `WITH b AS (
                  SELECT ${sql.key('ts')} AS k, ${aggs.map((a) => `${AGG_SQL[a]} AS ${a}`).join(', ')}
                    FROM (SELECT ts, value${needsNumber ? `, ${NUMBER} AS num` : ''} ${rows.sql}) r
                   GROUP BY 1)
                SELECT ${historyTimeSql(sql.start(k))} AS ts, ${cols}
                  FROM ${from}
                 ORDER BY ${k}`;
  const { rows: out } = await pool.query<BucketRow>({ text, values: [...rows.values(s), ...z] });
  return out;
}
