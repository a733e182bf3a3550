// The latest value of chosen attributes of many devices in one query (POST /history/latest, and
// the `lastValues` flag of GET /device and GET /device/{id}). Per (device, label) pair, one index
// probe of the history's (series, ts DESC) index: first the open region (`ts >=` the horizon,
// written as a literal so only its chunks are planned), and only when it has no row, the closed
// region inside the series' span (sql/022_history_closed_spans.sql), whose bounds come from the
// span row and prune the other chunks when the query runs. Open rows are always newer than
// closed ones, so the first row found is the latest (`LIMIT 1` over the two, in that order).
import type pg from 'pg';
import { errors } from '../errors.js';
import { bodySchema } from '../schemas/validator.js';
import { historyTimeSql } from '../time.js';
import { horizonOf } from './horizon.js';
import { openBound } from './repo.js';

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
 * The latest value of each (device, label) pair that has one, ordered by device id then label.
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
  const open = openBound(await horizonOf(pool));
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
  const row = (where: string) =>
    `SELECT ts, value FROM history
      WHERE series = k.series AND tenant = $1 AND device_id = k.id AND attr = k.label AND ${where}
      ORDER BY ts DESC LIMIT 1`;
  const { rows } = await pool.query<LatestRow>({
    text: `WITH d AS (${devices}),
                k AS (SELECT p.id, p.label, history_series($1, p.id, p.label) AS series FROM (${pairs}) p)
           SELECT k.id AS device_id, k.label AS attr, ${historyTimeSql('h.ts')} AS ts, h.value
             FROM k
             LEFT JOIN history_series_span sp ON sp.series = k.series
             JOIN LATERAL (
                   (${row(`ts >= ${open.sql}`)})
                   UNION ALL
                   (${row(`sp.series IS NOT NULL AND ts >= sp.first_ts AND ts <= sp.last_ts AND ts < ${open.sql}`)})
                   LIMIT 1) h ON true
            ORDER BY k.id, k.label`,
    values: [tenant, ids ?? String((sel as { template: number }).template), ...(labels ? [labels.filter((l) => !hasNul(l))] : [])],
  });
  return rows;
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
      maxItems: MAX_LATEST_DEVICES,
      description: `Device ids (at most ${MAX_LATEST_DEVICES}); ids of no device of the tenant are left out of the answer.`,
    },
    template: { type: 'integer', description: `A template id: all its devices (at most ${MAX_LATEST_DEVICES}).` },
    attrs: {
      type: 'array',
      items: { type: 'string' },
      description: 'Attribute labels; absent: every attribute of each device.',
    },
  },
  examples: [{ devices: ['a1b2c3', 'd4e5f6'], attrs: ['temperature'] }],
});

/** The body of POST /history/latest, checked: exactly one of devices / template, labels as strings. */
export function latestRequestOf(body: unknown): { sel: DeviceSelection; labels: string[] | undefined } {
  const bad = errors.badHistoryQuery;
  if (typeof body !== 'object' || body === null || Array.isArray(body))
    throw bad('The body must be an object with "devices" (a list of device ids) or "template" (a template id), and "attrs"');
  const b = body as Record<string, unknown>;
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
