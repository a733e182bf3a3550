// Device SQL. Every statement is scoped by tenant; callers own transactions and rules.
import type pg from 'pg';
import { microsToText, registryTimeSql } from '../../time.js';
import type { Page } from '../paging.js';
import { ATTR_COLUMNS, attrFromRow, nestAttrs, type AttrColumns, type AttrRecord } from '../attrs.js';
import { labelMatchSql, Params } from '../sql.js';
import type { DeviceQuery, DeviceRecord, DeviceShape, OverrideRow } from './types.js';
import { onlineSql } from './status.js';

type Db = pg.Pool | pg.PoolClient;

/**
 * How `attr=` filters are evaluated. `walk`: per device, in page order (cheap when most devices
 * match). `set`: from the matching overrides and template values to the devices (cheap when
 * few match; counts use it too). docs/registry.md has the measurements.
 */
export type AttrPlan = 'walk' | 'set';

interface DeviceRow extends AttrColumns {
  id: string;
  label: string;
  created: string;
  updated: string | null;
  tid: number | null;
  a_override: string | null;
  a_sealed?: Buffer | null;
}

/**
 * Conditions on `devices d`. The attribute filters first turn the label or type into template
 * ids with an InitPlan (`ARRAY(SELECT ...)`, run once per query), so the planner does not
 * multiply device_templates by template_attrs with a bad estimate (docs/registry.md, "Indexes").
 */
function listWhere(tenant: string, q: DeviceQuery, p: Params, plan: AttrPlan): string {
  const t = p.add(tenant);
  const conds = [`d.tenant = ${t}`];
  const f = q.filters;
  if (q.templateId !== undefined) {
    conds.push(
      `EXISTS (SELECT 1 FROM device_templates dt WHERE dt.tenant = d.tenant AND dt.device_id = d.id AND dt.template_id = ${p.add(q.templateId)})`,
    );
  }
  if (f.label !== undefined) conds.push(labelMatchSql('d.label', f.label, p));
  if (q.status !== undefined) {
    const online = onlineSql(p.add(q.status.offlineAfterSeconds), `${p.add(microsToText(q.status.nowUs))}::timestamptz`);
    conds.push(q.status.online ? online : `NOT ${online}`);
  }
  // A psk attribute's value in a device is its key, which no public view shows (nor its template
  // value, nor an override kept from before it became psk): attr= never matches one.
  for (const a of f.attrs) {
    const label = p.add(a.label);
    const value = p.add(a.value);
    if (plan === 'set') {
      // The device's override wins over the template's value: devices with an override of that
      // value, and devices whose template has that value and that do not override it. The ids
      // are collected first (an InitPlan array), then looked up in the devices' primary key, so
      // the planner cannot choose to walk every device on a misestimated join.
      conds.push(
        `d.id = ANY(ARRAY(SELECT o.device_id FROM device_overrides o JOIN template_attrs x ON x.tenant = o.tenant AND x.id = o.attr_id
             WHERE o.tenant = ${t} AND x.parent_id IS NULL AND x.label = ${label} AND x.value_type <> 'psk' AND o.static_value = ${value}
           UNION ALL
           SELECT dt.device_id FROM template_attrs x JOIN device_templates dt ON dt.tenant = x.tenant AND dt.template_id = x.template_id
             WHERE x.tenant = ${t} AND x.parent_id IS NULL AND x.label = ${label} AND x.value_type <> 'psk' AND x.static_value = ${value}
               AND NOT EXISTS (SELECT 1 FROM device_overrides o WHERE o.tenant = dt.tenant AND o.device_id = dt.device_id AND o.attr_id = x.id)))`,
      );
      continue;
    }
    const labelled = `ARRAY(SELECT x.id FROM template_attrs x WHERE x.tenant = ${t} AND x.parent_id IS NULL AND x.label = ${label} AND x.value_type <> 'psk')`;
    // Same rule, checked per device (the OR keeps both checks correlated, walking the devices
    // in page order; the InitPlans turn the label into ids once per query).
    conds.push(
      `(EXISTS (SELECT 1 FROM device_overrides o WHERE o.tenant = d.tenant AND o.device_id = d.id
           AND o.static_value = ${value} AND o.attr_id = ANY(${labelled}))
        OR EXISTS (SELECT 1 FROM device_templates dt WHERE dt.tenant = d.tenant AND dt.device_id = d.id
           AND dt.template_id = ANY(ARRAY(SELECT x.template_id FROM template_attrs x
                 WHERE x.tenant = ${t} AND x.parent_id IS NULL AND x.label = ${label} AND x.value_type <> 'psk' AND x.static_value = ${value}))
           AND NOT EXISTS (SELECT 1 FROM device_overrides o JOIN template_attrs x ON x.tenant = o.tenant AND x.id = o.attr_id
                 WHERE o.tenant = d.tenant AND o.device_id = d.id AND x.template_id = dt.template_id AND x.parent_id IS NULL AND x.label = ${label})))`,
    );
  }
  for (const x of f.attrTypes) {
    const v = p.add(x);
    conds.push(
      `EXISTS (SELECT 1 FROM device_templates dt WHERE dt.tenant = d.tenant AND dt.device_id = d.id
         AND dt.template_id = ANY(ARRAY(SELECT a.template_id FROM template_attrs a
               WHERE a.tenant = ${t} AND a.parent_id IS NULL AND (a.type = ${v} OR a.value_type = ${v}))))`,
    );
  }
  return conds.join(' AND ');
}

const orderBy = (sortByLabel: boolean, alias: string) => (sortByLabel ? `${alias}.label COLLATE "C", ${alias}.id` : `${alias}.id`);

/** How selectDevices orders and cuts what `where` chooses, and whether it reads the keys. */
interface Selection {
  /** Ordered by label (then id); else by id. */
  sortByLabel?: boolean;
  /** `LIMIT ... OFFSET ...` of a page, or none. */
  limit?: string;
  /** Also the sealed keys (internal views only). */
  withKeys?: boolean;
}

/**
 * The devices chosen by `where` (on `devices d`) with their templates, attributes and overrides:
 * one query.
 */
async function selectDevices(
  db: Db,
  p: Params,
  where: string,
  { sortByLabel = false, limit = '', withKeys = false }: Selection = {},
): Promise<DeviceRecord[]> {
  // The tenant is always the first parameter.
  const { rows } = await db.query<DeviceRow>(
    `WITH d AS (SELECT d.id, d.label, d.created, d.updated FROM devices d WHERE ${where} ORDER BY ${orderBy(sortByLabel, 'd')} ${limit})
     SELECT d.id, d.label, ${registryTimeSql('d.created')} AS created, ${registryTimeSql('d.updated')} AS updated,
            dt.template_id AS tid, ${ATTR_COLUMNS}, o.static_value AS a_override${withKeys ? ', k.sealed AS a_sealed' : ''}
     FROM d
     LEFT JOIN device_templates dt ON dt.tenant = $1 AND dt.device_id = d.id
     LEFT JOIN template_attrs a ON a.tenant = $1 AND a.template_id = dt.template_id
     LEFT JOIN device_overrides o ON o.tenant = $1 AND o.device_id = d.id AND o.attr_id = a.id
     ${withKeys ? 'LEFT JOIN device_psks k ON k.tenant = $1 AND k.device_id = d.id AND k.attr_id = a.id' : ''}
     ORDER BY ${orderBy(sortByLabel, 'd')}, dt.template_id, a.id`,
    p.values,
  );
  return group(rows);
}

/** Sealed keys travel on the record until the service opens them (internal views). */
export type SealedAttr = AttrRecord & { sealed?: Buffer };

function attrOf(r: DeviceRow): SealedAttr {
  const a: SealedAttr = attrFromRow(r);
  a.override = r.a_override;
  if (r.a_sealed) a.sealed = r.a_sealed;
  return a;
}

function group(rows: DeviceRow[]): DeviceRecord[] {
  const out: DeviceRecord[] = [];
  let i = 0;
  while (i < rows.length) {
    const first = rows[i]!;
    const device: DeviceRecord = { id: first.id, label: first.label, created: first.created, updated: first.updated, templates: [] };
    while (i < rows.length && rows[i]!.id === first.id) {
      const tid = rows[i]!.tid;
      let j = i;
      while (j < rows.length && rows[j]!.id === first.id && rows[j]!.tid === tid) j++;
      if (tid !== null) device.templates.push({ id: tid, attrs: nestAttrs(rows.slice(i, j), attrOf) });
      i = j;
    }
    out.push(device);
  }
  return out;
}

export async function getDevices(db: Db, tenant: string, ids: string[], withKeys = false): Promise<DeviceRecord[]> {
  const p = new Params();
  const where = `d.tenant = ${p.add(tenant)} AND d.id = ANY(${p.add(ids)}::text[])`;
  return selectDevices(db, p, where, { withKeys });
}

export async function getAllDevices(db: Db, tenant: string): Promise<DeviceRecord[]> {
  const p = new Params();
  return selectDevices(db, p, `d.tenant = ${p.add(tenant)}`);
}

export async function listDevices(
  db: Db,
  tenant: string,
  q: DeviceQuery,
  page: Page,
  plan: AttrPlan,
  withKeys = false,
): Promise<DeviceRecord[]> {
  const p = new Params();
  const where = listWhere(tenant, q, p, plan);
  const limit = `LIMIT ${p.add(page.size)} OFFSET ${p.add(page.offset)}`;
  return selectDevices(db, p, where, { sortByLabel: q.filters.sortByLabel, limit, withKeys });
}

/** The ids of one page, in page order (the public lists take each view from the view cache). */
export async function listDevicePageIds(db: Db, tenant: string, q: DeviceQuery, page: Page, plan: AttrPlan): Promise<string[]> {
  const p = new Params();
  const where = listWhere(tenant, q, p, plan);
  const { rows } = await db.query<{ id: string }>(
    `SELECT d.id FROM devices d WHERE ${where} ORDER BY ${orderBy(q.filters.sortByLabel, 'd')} LIMIT ${p.add(page.size)} OFFSET ${p.add(page.offset)}`,
    p.values,
  );
  return rows.map((r) => r.id);
}

export async function countDevices(db: Db, tenant: string, q: DeviceQuery): Promise<number> {
  const p = new Params();
  const { rows } = await db.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM devices d WHERE ${listWhere(tenant, q, p, 'set')}`,
    p.values,
  );
  return rows[0]!.n;
}

export async function listDeviceIds(db: Db, tenant: string, q: DeviceQuery): Promise<string[]> {
  const p = new Params();
  const { rows } = await db.query<{ id: string }>(
    `SELECT d.id FROM devices d WHERE ${listWhere(tenant, q, p, 'set')} ORDER BY ${orderBy(q.filters.sortByLabel, 'd')}`,
    p.values,
  );
  return rows.map((r) => r.id);
}

/** Locks the templates (FOR SHARE: no update or deletion meanwhile); returns those that exist. */
export async function lockTemplates(db: Db, tenant: string, ids: number[]): Promise<Set<number>> {
  if (ids.length === 0) return new Set();
  const { rows } = await db.query<{ id: number }>(
    'SELECT id FROM templates WHERE tenant = $1 AND id = ANY($2::bigint[]) ORDER BY id FOR SHARE',
    [tenant, ids],
  );
  return new Set(rows.map((r) => r.id));
}

/** The attributes (metadata nested) of templates, by template id. */
export async function templateAttrs(db: Db, tenant: string, ids: number[]): Promise<Map<number, AttrRecord[]>> {
  const out = new Map<number, AttrRecord[]>(ids.map((id) => [id, []]));
  if (ids.length === 0) return out;
  const { rows } = await db.query<AttrColumns>(
    `SELECT ${ATTR_COLUMNS} FROM template_attrs a WHERE a.tenant = $1 AND a.template_id = ANY($2::bigint[]) ORDER BY a.id`,
    [tenant, ids],
  );
  for (const a of nestAttrs(rows)) out.get(a.templateId)!.push(a);
  return out;
}

/**
 * Inserts devices `ids[i]` labelled `<label>_<indexes[i]>`, built from the shape's templates,
 * with the same overrides each: three set-based statements whatever the count. `ids` must be
 * distinct. Returns the ids that were free (ON CONFLICT DO NOTHING also waits out concurrent inserts).
 */
export async function insertDevices(
  db: Db,
  tenant: string,
  ids: string[],
  indexes: number[],
  { label, templates, overrides }: DeviceShape,
): Promise<Set<string>> {
  const { rows } = await db.query<{ id: string }>(
    `INSERT INTO devices (tenant, id, label)
     SELECT $1, u.id, $4 || '_' || u.n FROM unnest($2::text[], $3::int[]) AS u(id, n)
     ON CONFLICT DO NOTHING RETURNING id`,
    [tenant, ids, indexes, label],
  );
  const inserted = rows.map((r) => r.id);
  if (inserted.length === 0) return new Set();
  if (templates.length > 0) {
    await db.query(
      `INSERT INTO device_templates (tenant, device_id, template_id)
       SELECT $1, d, t FROM unnest($2::text[]) AS d CROSS JOIN unnest($3::bigint[]) AS t`,
      [tenant, inserted, templates],
    );
  }
  await insertOverrides(db, tenant, inserted, overrides);
  return new Set(inserted);
}

async function insertOverrides(db: Db, tenant: string, deviceIds: string[], overrides: OverrideRow[]): Promise<void> {
  if (overrides.length === 0 || deviceIds.length === 0) return;
  await db.query(
    `INSERT INTO device_overrides (tenant, device_id, attr_id, static_value)
     SELECT $1, d, o.attr_id, o.value FROM unnest($2::text[]) AS d
     CROSS JOIN unnest($3::bigint[], $4::text[]) AS o(attr_id, value)`,
    [tenant, deviceIds, overrides.map((o) => o.attrId), overrides.map((o) => o.value)],
  );
}

/**
 * PUT /device: new label, templates and override list. Keys of attributes that are still on
 * the device stay; the others go.
 */
export async function replaceDevice(db: Db, tenant: string, id: string, { label, templates, overrides }: DeviceShape): Promise<void> {
  await db.query('UPDATE devices SET label = $3, updated = now() WHERE tenant = $1 AND id = $2', [tenant, id, label]);
  await db.query('DELETE FROM device_templates WHERE tenant = $1 AND device_id = $2 AND NOT (template_id = ANY($3::bigint[]))', [
    tenant,
    id,
    templates,
  ]);
  if (templates.length > 0) {
    await db.query(
      `INSERT INTO device_templates (tenant, device_id, template_id) SELECT $1, $2, t FROM unnest($3::bigint[]) AS t ON CONFLICT DO NOTHING`,
      [tenant, id, templates],
    );
  }
  await db.query('DELETE FROM device_overrides WHERE tenant = $1 AND device_id = $2', [tenant, id]);
  await insertOverrides(db, tenant, [id], overrides);
  await db.query(
    `DELETE FROM device_psks k WHERE k.tenant = $1 AND k.device_id = $2
       AND NOT EXISTS (SELECT 1 FROM template_attrs a WHERE a.tenant = k.tenant AND a.id = k.attr_id AND a.template_id = ANY($3::bigint[]))`,
    [tenant, id, templates],
  );
}

export async function deleteDevice(db: Db, tenant: string, id: string): Promise<void> {
  await db.query('DELETE FROM devices WHERE tenant = $1 AND id = $2', [tenant, id]);
}

/** Returns the ids removed (a device created since the caller's read is removed and named too). */
/**
 * Locks every device of the tenant (DELETE /device), in id order; returns their ids, the only
 * ones `deleteAllDevices` may remove: each is then read (after any write to it committed) for
 * the answer. A device created after this statement's snapshot is kept, as if created just after
 * (before, found by an audit, it was removed but missing from `removed_devices`).
 */
export async function lockAllDevices(db: Db, tenant: string): Promise<string[]> {
  const { rows } = await db.query<{ id: string }>('SELECT id FROM devices WHERE tenant = $1 ORDER BY id FOR UPDATE', [tenant]);
  return rows.map((r) => r.id);
}

/** Removes the devices `lockAllDevices` locked; returns the ids removed. */
export async function deleteAllDevices(db: Db, tenant: string, locked: string[]): Promise<string[]> {
  const { rows } = await db.query<{ id: string }>('DELETE FROM devices WHERE tenant = $1 AND id = ANY($2::text[]) RETURNING id', [
    tenant,
    locked,
  ]);
  return rows.map((r) => r.id);
}
