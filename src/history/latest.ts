// The latest value of chosen attributes of many devices (POST /history/latest, and the
// `lastValues` flag of GET /device and GET /device/{id}), planned with only the chunks it reads:
//   1. one statement over the open region (`ts >=` the horizon, a literal: its chunks only):
//      per (device, label) pair, one probe of the (series, ts DESC) index, and for a pair with
//      no row there, its series' span (sql/022_history_closed_spans.sql);
//   2. for those pairs, the newest row in the chunk of the span's last_ts or the one before (a
//      span ends at its last row, or at the end of that row's chunk), grouped by that chunk:
//      one statement a group, its bounds parameters, so planned with those two chunks only (a
//      bound taken from the span row in the same statement is known only when the query runs,
//      and PostgreSQL and TimescaleDB plan every chunk for it: 21-32 ms of planning with a year
//      of daily chunks);
//   3. only if that finds nothing (retention, a delete by hand: the span is then wider than the
//      data), the newest row inside the span from the oldest chunk on, pair by pair.
// Open rows are always newer than closed ones, so the first row found is the latest.
import type pg from 'pg';
import { errors } from '../errors.js';
import { bodySchema } from '../schemas/validator.js';
import { historyTimeSql, microsToText } from '../time.js';
import { horizonOf, oldestChunkUs, type Horizon } from './horizon.js';
import { openBound, spanSql } from './repo.js';

/** Most devices one request may name (or its template may have). */
export const MAX_LATEST_DEVICES = 1000;

export interface LatestRow {
  device_id: string;
  attr: string;
  ts: string;
  /** JSON text of the value. */
  value: string;
}

/** Which devices: ids (those of the tenant; others are left out), or every device of a template. */
export type DeviceSelection = { devices: string[] } | { template: number };

const hasNul = (s: string) => s.includes('\0');

/**
 * The latest value of each (device, label) pair that has one, ordered by device id then label,
 * byte by byte (COLLATE "C": the same order on every database, whatever its locale; before,
 * found by an audit, a database created with en-US answered `aa02` before `AB01`).
 * `labels` undefined: every attribute of each device (its templates' labels).
 */
export async function latestValues(
  pool: pg.Pool,
  tenant: string,
  sel: DeviceSelection,
  labels: string[] | undefined,
): Promise<LatestRow[]> {
  const ids = 'devices' in sel ? sel.devices.filter((d) => !hasNul(d)) : undefined;
  if (ids?.length === 0 || labels?.length === 0) return [];
  const h = await horizonOf(pool);
  const open = openBound(h);
  const devices =
    ids !== undefined
      ? `SELECT id FROM devices WHERE tenant = $1 AND id = ANY($2::text[])`
      : `SELECT device_id AS id FROM device_templates WHERE tenant = $1 AND template_id = $2::bigint`;
  // A device's labels are its templates' now: a label it no longer has answers nothing, whatever
  // rows it left (as in every other history read).
  const pairs = `SELECT DISTINCT d.id, a.label FROM d
           JOIN device_templates dt ON dt.tenant = $1 AND dt.device_id = d.id
           JOIN template_attrs a ON a.tenant = dt.tenant AND a.template_id = dt.template_id AND a.parent_id IS NULL
          ${labels !== undefined ? 'WHERE a.label = ANY($3::text[])' : ''}`;
  const values = [tenant, ids ?? String((sel as { template: number }).template), ...(labels ? [labels.filter((l) => !hasNul(l))] : [])];
  const { rows } = await pool.query<Pair>({
    text: `WITH d AS (${devices}),
                k AS (SELECT p.id, p.label, history_series($1, p.id, p.label) AS series FROM (${pairs}) p)
           SELECT k.id AS device_id, k.label AS attr, k.series::text AS series, ${historyTimeSql('h.ts')} AS ts, h.value,
                  ${spanSql('sp')}
             FROM k
             LEFT JOIN history_series_span sp ON sp.series = k.series
             LEFT JOIN LATERAL (
                   SELECT ts, value FROM history
                    WHERE series = k.series AND tenant = $1 AND device_id = k.id AND attr = k.label AND ts >= ${open.sql}
                    ORDER BY ts DESC LIMIT 1) h ON true
            WHERE h.ts IS NOT NULL OR sp.series IS NOT NULL
            ORDER BY k.id COLLATE "C", k.label COLLATE "C"`,
    values,
  });
  const closed = rows.filter((r) => r.ts === null);
  if (closed.length > 0) await readClosedLatest(pool, tenant, closed, h);
  return rows.filter((r): r is Pair & LatestRow => r.ts !== null).map(({ device_id, attr, ts, value }) => ({ device_id, attr, ts, value }));
}

/** A pair as the open-region statement answers it: its row there, else its span's bounds (µs). */
interface Pair {
  device_id: string;
  attr: string;
  series: string;
  ts: string | null;
  value: string | null;
  first_us: string;
  last_us: string;
}

/**
 * Steps 2 and 3 above: fills `ts` and `value` of the pairs that have a closed row. A span ends
 * at its last row, or (widened by a late row) at the end of that row's chunk: the row is in the
 * chunk of `last_ts` or the one before. Pairs are read grouped by that chunk, each group in one
 * statement bounded by those two chunks (parameters: planned with them only).
 */
async function readClosedLatest(pool: pg.Pool, tenant: string, pairs: Pair[], h: Horizon): Promise<void> {
  const groups = new Map<number, Pair[]>();
  for (const p of pairs) {
    const chunk = Math.floor(Number(p.last_us) / h.chunkUs);
    groups.set(chunk, [...(groups.get(chunk) ?? []), p]);
  }
  for (const [chunk, group] of groups) {
    const { rows } = await pool.query<{ n: string; ts: string; value: string }>({
      text: `SELECT k.n, ${historyTimeSql('h.ts')} AS ts, h.value
               FROM unnest($2::bigint[], $3::int8[], $4::text[], $5::text[]) WITH ORDINALITY AS k(series, last_us, id, label, n)
               JOIN LATERAL (
                     SELECT ts, value FROM history
                      WHERE series = k.series AND tenant = $1 AND device_id = k.id AND attr = k.label
                        AND ts >= $6::timestamptz AND ts < $7::timestamptz AND ts <= 'epoch'::timestamptz + k.last_us * interval '1 microsecond'
                      ORDER BY ts DESC LIMIT 1) h ON true`,
      values: [
        tenant,
        group.map((p) => p.series),
        group.map((p) => p.last_us),
        group.map((p) => p.device_id),
        group.map((p) => p.attr),
        microsToText((chunk - 1) * h.chunkUs),
        microsToText((chunk + 1) * h.chunkUs),
      ],
    });
    for (const r of rows) Object.assign(group[Number(r.n) - 1]!, { ts: r.ts, value: r.value });
  }
  const rest = pairs.filter((p) => p.ts === null);
  // (read afresh: a late row may have made an older chunk since the horizon was read)
  const oldest = rest.length > 0 ? ((await oldestChunkUs(pool)) ?? -Infinity) : -Infinity;
  for (const p of rest) {
    // (not before the oldest chunk: retention may have dropped the span's start)
    const { rows: newest } = await pool.query<{ ts: string; value: string }>({
      text: `SELECT ${historyTimeSql('ts')} AS ts, value FROM history
              WHERE series = $2::bigint AND tenant = $1 AND device_id = $3 AND attr = $4 AND ts >= $5::timestamptz AND ts <= $6::timestamptz
              ORDER BY ts DESC LIMIT 1`,
      values: [tenant, p.series, p.device_id, p.attr, microsToText(Math.max(Number(p.first_us), oldest)), microsToText(Number(p.last_us))],
    });
    if (newest[0]) Object.assign(p, newest[0]);
  }
}
/** How many devices a template of the tenant has (the limit of a `template` request). */
export async function templateDeviceCount(pool: pg.Pool, tenant: string, template: number): Promise<number> {
  const { rows } = await pool.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM device_templates WHERE tenant = $1 AND template_id = $2::bigint`,
    [tenant, String(template)],
  );
  return rows[0]!.n;
}

export const latestBody = bodySchema({
  $id: 'history.latest.body',
  type: 'object',
  properties: {
    devices: {
      type: 'array',
      items: { type: 'string' },
      // (no maxItems: an id repeated counts once, so a longer list may name few enough devices)
      description: `Device ids (at most ${MAX_LATEST_DEVICES} different ones; an id repeated counts once); ids of no device of the tenant are left out of the answer.`,
    },
    template: { type: 'integer', description: `A template id: all its devices (at most ${MAX_LATEST_DEVICES}).` },
    attrs: {
      type: 'array',
      items: { type: 'string' },
      description: 'Attribute labels; absent: every attribute of each device.',
    },
  },
  additionalProperties: false,
  // Exactly one of them, as `latestRequestOf` checks (before, found by an audit, the document
  // admitted `{}` and both together, which are answered 400).
  oneOf: [
    { properties: { devices: true }, required: ['devices'] },
    { properties: { template: true }, required: ['template'] },
  ],
  description: 'Exactly one of `devices` and `template`.',
  examples: [{ devices: ['a1b2c3', 'd4e5f6'], attrs: ['temperature'] }],
});

const LATEST_KEYS = ['devices', 'template', 'attrs'];

/** The body of POST /history/latest, checked: no other key, exactly one of devices / template, labels as strings. */
export function latestRequestOf(body: unknown): { sel: DeviceSelection; labels: string[] | undefined } {
  const bad = errors.badHistoryQuery;
  if (typeof body !== 'object' || body === null || Array.isArray(body))
    throw bad('The body must be an object with "devices" (a list of device ids) or "template" (a template id), and "attrs"');
  const b = body as Record<string, unknown>;
  // A misspelt key (`attr`) would otherwise answer something else quietly (every attribute).
  const unknown = Object.keys(b).find((k) => !LATEST_KEYS.includes(k));
  if (unknown !== undefined)
    throw bad(`Unknown key ${JSON.stringify(unknown.slice(0, 64))} (POST /history/latest takes "devices", "template" and "attrs")`);
  if ((b.devices === undefined) === (b.template === undefined)) throw bad('Give exactly one of "devices" and "template"');
  let labels: string[] | undefined;
  if (b.attrs !== undefined) {
    if (!Array.isArray(b.attrs) || !b.attrs.every((a) => typeof a === 'string')) throw bad('"attrs" must be a list of attribute labels');
    labels = [...new Set(b.attrs)];
  }
  if (b.devices !== undefined) {
    if (!Array.isArray(b.devices) || !b.devices.every((d) => typeof d === 'string')) throw bad('"devices" must be a list of device ids');
    const devices = [...new Set(b.devices)];
    if (devices.length > MAX_LATEST_DEVICES) throw bad(`At most ${MAX_LATEST_DEVICES} devices per request, got ${devices.length}`);
    return { sel: { devices }, labels };
  }
  const t = b.template;
  if (typeof t !== 'number' || !Number.isSafeInteger(t)) throw bad('"template" must be a template id (an integer)');
  return { sel: { template: t }, labels };
}

/** Rows as the answer's JSON array (`value` keeps its JSON type). */
export function latestJson(rows: LatestRow[]): string {
  return (
    '[' +
    rows
      .map((r) => `{"device_id":${JSON.stringify(r.device_id)},"attr":${JSON.stringify(r.attr)},"ts":"${r.ts}","value":${r.value}}`)
      .join(',') +
    ']'
  );
}

/** `{label: {"ts", "value"}}` of one device's rows: the `last_values` of its view. */
export function lastValuesJson(rows: LatestRow[]): string {
  return '{' + rows.map((r) => `${JSON.stringify(r.attr)}:{"ts":"${r.ts}","value":${r.value}}`).join(',') + '}';
}
