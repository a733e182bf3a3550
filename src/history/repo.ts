// History SQL. Every series is read through the index (series, ts DESC), the series key
// standing for (tenant, device_id, attr) (src/history/series.ts): one range scan per chunk,
// stopping after `limit` rows. Keys may collide, so each row is checked against the texts.
//
// A read never plans more chunks than its range needs, however many the table has
// (sql/022_history_closed_spans.sql, docs/messaging.md §6):
//   1. The open region (`ts >=` the horizon: the previous and current chunk, and any future
//      one) with the series' span, in one statement per request shape, the horizon written in
//      as a literal. Assembled from fixed fragments and that literal (a value of the chunk
//      layout, never of the request) and prepared by name: PostgreSQL plans it once, with the
//      open chunks only, and reuses the plan until the horizon moves (once a chunk interval).
//   2. Only when those rows are not enough and the series has rows before the horizon (its
//      span): windows with constant bounds inside the span and the query's range, newest
//      first for lastN, oldest first for firstN, each twice as wide as the one before. These
//      are sent unnamed, so each is planned with its bounds and so with its window's chunks.
import type pg from 'pg';
import { historyTimeSql, microsToText } from '../time.js';
import { horizonOf, oldestChunkUs, type Horizon } from './horizon.js';
import type { HistoryQuery } from './query.js';
import { seriesKey } from './series.js';

/** PostgreSQL text cannot hold NUL: no id or label with one exists, and it must not reach SQL. */
const hasNul = (s: string) => s.includes('\0');

export interface HistoryRow {
  attr: string;
  ts: string;
  /** JSON text of the value. */
  value: string;
}

/** The value types of the device's attributes by label (a label of several templates: each), or undefined if there is no such device. */
export async function deviceAttributeTypes(pool: pg.Pool, tenant: string, id: string): Promise<Map<string, string[]> | undefined> {
  if (hasNul(id)) return undefined;
  const { rows } = await pool.query<{ label: string | null; value_type: string | null }>({
    name: 'history-device-attribute-types',
    text: `SELECT a.label, a.value_type
             FROM devices d
             LEFT JOIN device_templates dt ON dt.tenant = d.tenant AND dt.device_id = d.id
             LEFT JOIN template_attrs a ON a.tenant = dt.tenant AND a.template_id = dt.template_id AND a.parent_id IS NULL
            WHERE d.tenant = $1 AND d.id = $2
            ORDER BY a.id`,
    values: [tenant, id],
  });
  if (rows.length === 0) return undefined;
  const out = new Map<string, string[]>();
  for (const r of rows) {
    if (r.label === null) continue;
    const types = out.get(r.label) ?? [];
    if (!types.includes(r.value_type ?? '')) types.push(r.value_type ?? '');
    out.set(r.label, types);
  }
  return out;
}

/** The labels of the device's attributes (by attribute id), or undefined if there is no such device. */
export async function deviceAttributeLabels(pool: pg.Pool, tenant: string, id: string): Promise<string[] | undefined> {
  const types = await deviceAttributeTypes(pool, tenant, id);
  return types && [...types.keys()];
}

function bounds(q: HistoryQuery, firstParam: number): { sql: string; values: string[]; key: string } {
  let sql = '';
  const values: string[] = [];
  let p = firstParam;
  if (q.from !== undefined) {
    sql += ` AND ts >= $${p++}::timestamptz`;
    values.push(q.from);
  }
  if (q.to !== undefined) {
    sql += ` AND ts <= $${p++}::timestamptz`;
    values.push(q.to);
  }
  return { sql, values, key: `${q.from !== undefined ? 'f' : ''}${q.to !== undefined ? 't' : ''}` };
}

/**
 * How a statement picks a series' rows. `fast`: by the series key alone, with whether each row
 * really is of the series (`mine`) computed but not filtered on. Comparing the texts in WHERE
 * would make PostgreSQL multiply their selectivities with the key's (it cannot know the key
 * determines them), estimate ~1 row per partition and read a whole series to sort it, instead
 * of stopping after `limit` rows of an ordered index scan. `exact`: the texts in WHERE too,
 * used only when a fast read met a row of another series (a key collision).
 */
type Mode = 'fast' | 'exact';

/** Whether a history row is of device $1/$2 and attribute `label` (an SQL expression). */
const matchSql = (label: string) => `tenant = $1 AND device_id = $2 AND attr = ${label}`;
const filterSql = (mode: Mode, label: string) => (mode === 'exact' ? ` AND ${matchSql(label)}` : '');

async function withoutCollisions<T extends { mine: boolean | null }>(read: (mode: Mode) => Promise<T[]>): Promise<T[]> {
  const rows = await read('fast');
  return rows.every((r) => r.mine !== false) ? rows : read('exact');
}

type Row = HistoryRow & { mine: boolean };

/** The horizon as the literal of the open region's bound, and the statement name's part for it. */
export function openBound(h: Horizon): { sql: string; key: string } {
  return h.closedUs === -Infinity
    ? { sql: `'-infinity'::timestamptz`, key: 'all' }
    : { sql: `'${microsToText(h.closedUs)}'::timestamptz`, key: String(h.closedUs) };
}

/**
 * The open region's LIMIT, written into the statement: the request's limit rounded up to 1, 2,
 * 3, 4, 6, 8, 12, 16, 24... (at most 1.5 times it; the extra rows are dropped here). With a
 * parameter, the generic plan assumes a LIMIT of a tenth of the rows while each custom plan
 * knows it, so PostgreSQL found the generic plan dearer and planned every request anew (seen
 * with TimescaleDB: ~510 against ~190 µs of database CPU for a lastN); with a literal both agree
 * and the plan is reused. The rounding keeps the number of prepared statements small.
 */
export function openLimit(limit: number): number {
  let step = 1;
  while (step * 2 < limit) step *= 2;
  return limit <= step ? step : limit <= step * 1.5 ? step * 1.5 : step * 2;
}

/** SQL of a series' span bounds in µs (NULL: no rows before the horizon). */
export const spanSql = (alias: string) =>
  `(extract(epoch FROM ${alias}.first_ts) * 1000000)::int8 AS first_us, (extract(epoch FROM ${alias}.last_ts) * 1000000)::int8 AS last_us`;

interface Span {
  firstUs: number;
  lastUs: number;
}

const spanOf = (r: { first_us: number | null; last_us: number | null }): Span | undefined =>
  r.first_us === null || r.last_us === null ? undefined : { firstUs: r.first_us, lastUs: r.last_us };

/**
 * The first window's length in chunk intervals. Each window is one more statement planned
 * (~0.15–0.2 ms of database CPU), and a chunk more in it only ~0.015 ms: a wide first window
 * saves statements, and its ordered index scans stop after `need` rows anyway.
 */
const FIRST_WINDOW_CHUNKS = 4;

/** One series' read: where (pool, key), how (`mode`), what (`q`) and the horizon it splits at. */
interface SeriesRead {
  pool: pg.Pool;
  mode: Mode;
  key: { tenant: string; id: string; label: string; series: string };
  q: HistoryQuery;
  h: Horizon;
}

/**
 * Up to `need` rows of one series from before the horizon, in the query's order: windows
 * [lo, hi) inside the series' span and the query's range, each planned with its own chunks.
 * The first window is FIRST_WINDOW_CHUNKS intervals long, then each is twice as long, so a
 * series whose rows are far apart costs a few statements, never one per chunk.
 */
async function readClosed({ pool, mode, key, q, h }: SeriesRead, span: Span, need: number): Promise<Row[]> {
  let lo = Math.max(span.firstUs, q.fromUs ?? -Infinity);
  // Not before the oldest chunk: retention may have dropped the span's start. The cached value
  // only says whether to ask; the answer is read afresh (a late row may have made an older chunk).
  if (h.oldestUs !== undefined && h.oldestUs > lo) lo = Math.max(lo, (await oldestChunkUs(pool)) ?? lo);
  // Exclusive upper end: bounds are whole microseconds, so `ts <= x` is `ts < x + 1`.
  let hi = Math.min(h.closedUs, span.lastUs + 1, q.toUs === undefined ? Infinity : q.toUs + 1);
  const desc = q.order === 'desc';
  const out: Row[] = [];
  let width = FIRST_WINDOW_CHUNKS * h.chunkUs;
  while (out.length < need && lo < hi) {
    const [a, b] = desc ? [Math.max(lo, hi - width), hi] : [lo, Math.min(hi, lo + width)];
    width *= 2;
    const { rows } = await pool.query<Row>({
      text: `SELECT attr, ${historyTimeSql('ts')} AS ts, value, ${matchSql('$3')} AS mine FROM history
              WHERE series = $4::bigint${filterSql(mode, '$3')} AND ts >= $5::timestamptz AND ts < $6::timestamptz
              ORDER BY history.ts ${desc ? 'DESC' : 'ASC'}
              LIMIT $7`,
      values: [key.tenant, key.id, key.label, key.series, microsToText(a), microsToText(b), need - out.length],
    });
    // One by one: spread into push, some 120,000 rows (lastN up to HISTORY_MAX_RESULTS) overflow the call stack.
    for (const row of rows) out.push(row);
    if (desc) hi = a;
    else lo = b;
  }
  return out;
}

/** One series' answer from its open-region rows and span: the closed region read as needed. */
async function completeSeries(read: SeriesRead, fetched: Row[], span: Span | undefined): Promise<Row[]> {
  const { q } = read;
  const open = fetched.slice(0, q.limit); // the statement's LIMIT is openLimit(q.limit)
  if (q.order === 'desc') {
    if (open.length >= q.limit || !span) return open;
    return open.concat(await readClosed(read, span, q.limit - open.length));
  }
  if (!span) return open;
  const closed = await readClosed(read, span, q.limit);
  return closed.length >= q.limit ? closed : closed.concat(open.slice(0, q.limit - closed.length));
}

/** Rows of the given series, grouped by label in the order asked, each ordered by `q.order`. */
export async function readSeries(pool: pg.Pool, tenant: string, id: string, asked: string[], q: HistoryQuery): Promise<HistoryRow[]> {
  const labels = asked.filter((l) => !hasNul(l));
  if (labels.length === 0 || hasNul(id)) return [];
  const h = await horizonOf(pool);
  const open = openBound(h);
  const dir = q.order === 'asc' ? 'ASC' : 'DESC';
  const b = bounds(q, 5);
  const limit = openLimit(q.limit);
  const keys = labels.map((l) => seriesKey(tenant, id, l));
  return withoutCollisions(async (mode) => {
    const { rows } = await pool.query<Row & { label: string; first_us: number | null; last_us: number | null }>({
      name: `history-many-${mode}-${q.order}-${b.key}-${limit}-${open.key}`,
      text: `SELECT a.label, ${spanSql('sp')}, h.attr, ${historyTimeSql('h.ts')} AS ts, h.value, h.mine
               FROM history_labels($3::text[], $4::bigint[]) AS a(label, series, ord)
               LEFT JOIN history_series_span sp ON sp.series = a.series
               LEFT JOIN LATERAL (
                     SELECT attr, ts, value, ${matchSql('a.label')} AS mine FROM history
                      WHERE series = a.series${filterSql(mode, 'a.label')} AND ts >= ${open.sql}${b.sql}
                      ORDER BY ts ${dir}
                      LIMIT ${limit}) h ON true
              ORDER BY a.ord, h.ts ${dir}`,
      values: [tenant, id, labels, keys, ...b.values],
    });
    const out: Row[] = [];
    for (let i = 0, start = 0; i < labels.length; i++) {
      let end = start;
      while (end < rows.length && rows[end]!.label === labels[i]) end++;
      const mine = rows.slice(start, end).filter((r) => r.attr !== null);
      const key = { tenant, id, label: labels[i]!, series: keys[i]! };
      for (const r of await completeSeries({ pool, mode, key, q, h }, mine, spanOf(rows[start]!)))
        out.push({ attr: labels[i]!, ts: r.ts, value: r.value, mine: r.mine });
      start = end;
    }
    return out;
  });
}

/**
 * One label with the device check in the same statement (one round trip: the common lastN
 * request). Undefined: no such device in the tenant. A label the device does not have (any
 * more) reads nothing, whatever rows it left. (`OFFSET 0` keeps the checks in their subquery:
 * flattened, each use of `has_attr` would run the EXISTS again.)
 */
export async function readOneSeriesOfDevice(
  pool: pg.Pool,
  tenant: string,
  id: string,
  label: string,
  q: HistoryQuery,
): Promise<HistoryRow[] | undefined> {
  if (hasNul(label)) return (await deviceAttributeLabels(pool, tenant, id)) ? [] : undefined;
  if (hasNul(id)) return undefined;
  const h = await horizonOf(pool);
  const open = openBound(h);
  const dir = q.order === 'asc' ? 'ASC' : 'DESC';
  const b = bounds(q, 5);
  const limit = openLimit(q.limit);
  const key = { tenant, id, label, series: seriesKey(tenant, id, label) };
  let found = false;
  const rows = await withoutCollisions(async (mode) => {
    const res = await pool.query<Row & { found: boolean; has_attr: boolean; first_us: number | null; last_us: number | null }>({
      name: `history-one-device-${mode}-${q.order}-${b.key}-${limit}-${open.key}`,
      text: `SELECT d.found, d.has_attr, ${spanSql('sp')}, h.attr, ${historyTimeSql('h.ts')} AS ts, h.value, h.mine
               FROM (SELECT EXISTS (SELECT 1 FROM devices WHERE tenant = $1 AND id = $2) AS found,
                            EXISTS (SELECT 1 FROM device_templates dt
                                      JOIN template_attrs a ON a.tenant = dt.tenant AND a.template_id = dt.template_id
                                     WHERE dt.tenant = $1 AND dt.device_id = $2 AND a.label = $3 AND a.parent_id IS NULL) AS has_attr
                      OFFSET 0) d
               LEFT JOIN history_series_span sp ON d.has_attr AND sp.series = $4::bigint
               LEFT JOIN LATERAL (
                     SELECT attr, ts, value, ${matchSql('$3')} AS mine FROM history
                      WHERE series = $4::bigint${filterSql(mode, '$3')} AND ts >= ${open.sql}${b.sql}
                      ORDER BY ts ${dir}
                      LIMIT ${limit}) h ON d.has_attr
              ORDER BY h.ts ${dir}`,
      values: [key.tenant, key.id, key.label, key.series, ...b.values],
    });
    const first = res.rows[0]!;
    found = first.found;
    if (!first.found || !first.has_attr) return [];
    return completeSeries({ pool, mode, key, q, h }, first.attr === null ? [] : res.rows, spanOf(first));
  });
  return found ? rows : undefined;
}
