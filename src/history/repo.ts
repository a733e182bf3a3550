// History SQL. The statements are assembled from fixed fragments only (which bounds are given,
// which order), never from input, and prepared by name so PostgreSQL plans each shape once.
// Every series is read through the index (series, ts DESC), the series key standing for
// (tenant, device_id, attr) (src/history/series.ts): one range scan per chunk/partition,
// stopping after `limit` rows. Keys may collide, so each row is checked against the texts.
import type pg from 'pg';
import { historyTimeSql } from '../time.js';
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

/** The labels of the device's attributes (by attribute id), or undefined if there is no such device. */
export async function deviceAttributeLabels(pool: pg.Pool, tenant: string, id: string): Promise<string[] | undefined> {
  if (hasNul(id)) return undefined;
  const { rows } = await pool.query<{ label: string | null }>({
    name: 'history-device-labels',
    text: `SELECT a.label
             FROM devices d
             LEFT JOIN device_templates dt ON dt.tenant = d.tenant AND dt.device_id = d.id
             LEFT JOIN template_attrs a ON a.tenant = dt.tenant AND a.template_id = dt.template_id AND a.parent_id IS NULL
            WHERE d.tenant = $1 AND d.id = $2
            ORDER BY a.id`,
    values: [tenant, id],
  });
  if (rows.length === 0) return undefined;
  return [...new Set(rows.map((r) => r.label).filter((l): l is string => l !== null))];
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

async function withoutCollisions<T extends { mine: boolean }>(read: (mode: Mode) => Promise<T[]>): Promise<T[]> {
  const rows = await read('fast');
  return rows.every((r) => r.mine !== false) ? rows : read('exact');
}

/** Rows of the given series, grouped by label in the order asked, each ordered by `q.order`. */
export async function readSeries(pool: pg.Pool, tenant: string, id: string, asked: string[], q: HistoryQuery): Promise<HistoryRow[]> {
  const labels = asked.filter((l) => !hasNul(l));
  if (labels.length === 0 || hasNul(id)) return [];
  const dir = q.order === 'asc' ? 'ASC' : 'DESC';
  const b = bounds(q, 5);
  if (labels.length === 1) {
    return withoutCollisions(async (mode) => {
      const { rows } = await pool.query<HistoryRow & { mine: boolean }>({
        name: `history-one-${mode}-${q.order}-${b.key}`,
        text: `SELECT attr, ${historyTimeSql('ts')} AS ts, value, ${matchSql('$3')} AS mine
                 FROM history
                WHERE series = $4::bigint${filterSql(mode, '$3')}${b.sql}
                ORDER BY ts ${dir}
                LIMIT $${5 + b.values.length}`,
        values: [tenant, id, labels[0]!, seriesKey(tenant, id, labels[0]!), ...b.values, q.limit],
      });
      return rows;
    });
  }
  return withoutCollisions(async (mode) => {
    const { rows } = await pool.query<HistoryRow & { mine: boolean }>({
      name: `history-many-${mode}-${q.order}-${b.key}`,
      text: `SELECT a.label AS attr, ${historyTimeSql('h.ts')} AS ts, h.value, h.mine
               FROM unnest($3::text[], $4::bigint[]) WITH ORDINALITY AS a(label, series, ord)
              CROSS JOIN LATERAL (
                     SELECT ts, value, ${matchSql('a.label')} AS mine FROM history
                      WHERE series = a.series${filterSql(mode, 'a.label')}${b.sql}
                      ORDER BY ts ${dir}
                      LIMIT $${5 + b.values.length}) h
              ORDER BY a.ord, h.ts ${dir}`,
      values: [tenant, id, labels, labels.map((l) => seriesKey(tenant, id, l)), ...b.values, q.limit],
    });
    return rows;
  });
}

/**
 * One label with the device check in the same statement (one round trip: the common lastN
 * request). Undefined: no such device in the tenant. A label the device does not have (any
 * more) reads nothing, whatever rows it left.
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
  const dir = q.order === 'asc' ? 'ASC' : 'DESC';
  const b = bounds(q, 5);
  const rows = await withoutCollisions(async (mode) => {
    const res = await pool.query<HistoryRow & { found: boolean; mine: boolean }>({
      name: `history-one-device-${mode}-${q.order}-${b.key}`,
      text: `SELECT d.found, h.attr, ${historyTimeSql('h.ts')} AS ts, h.value, h.mine
               FROM (SELECT EXISTS (SELECT 1 FROM devices WHERE tenant = $1 AND id = $2) AS found,
                            EXISTS (SELECT 1 FROM device_templates dt
                                      JOIN template_attrs a ON a.tenant = dt.tenant AND a.template_id = dt.template_id
                                     WHERE dt.tenant = $1 AND dt.device_id = $2 AND a.label = $3 AND a.parent_id IS NULL) AS has_attr) d
               LEFT JOIN LATERAL (
                     SELECT attr, ts, value, ${matchSql('$3')} AS mine FROM history
                      WHERE series = $4::bigint${filterSql(mode, '$3')}${b.sql}
                      ORDER BY ts ${dir}
                      LIMIT $${5 + b.values.length}) h ON d.has_attr
              ORDER BY h.ts ${dir}`,
      values: [tenant, id, label, seriesKey(tenant, id, label), ...b.values, q.limit],
    });
    return res.rows;
  });
  if (!rows[0]?.found) return undefined;
  return rows[0].attr === null ? [] : rows;
}
