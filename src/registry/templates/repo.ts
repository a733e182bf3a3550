// Template SQL. Every statement is scoped by tenant; callers own transactions and rules.
import type pg from 'pg';
import { registryTimeSql } from '../../time.js';
import { ATTR_COLUMNS, nestAttrs, type AttrColumns } from '../attrs.js';
import { labelMatchSql, Params } from '../sql.js';
import type { ListFilters, Page } from '../paging.js';
import type { AttrChange, NewAttrRow, TemplateRecord } from './types.js';

type Db = pg.Pool | pg.PoolClient;

interface TemplateRow extends AttrColumns {
  id: number;
  label: string;
  created: string;
  updated: string | null;
  offline_after: number | null;
}

/** Conditions on `templates t` for a list request (one EXISTS per attr / attr_type filter). */
function listWhere(tenant: string, f: ListFilters, p: Params): string {
  const conds = [`t.tenant = ${p.add(tenant)}`];
  if (f.label !== undefined) conds.push(labelMatchSql('t.label', f.label, p));
  for (const a of f.attrs) {
    conds.push(
      `EXISTS (SELECT 1 FROM template_attrs a WHERE a.tenant = t.tenant AND a.template_id = t.id AND a.parent_id IS NULL
         AND a.label = ${p.add(a.label)} AND a.static_value = ${p.add(a.value)})`,
    );
  }
  for (const x of f.attrTypes) {
    const v = p.add(x);
    conds.push(
      `EXISTS (SELECT 1 FROM template_attrs a WHERE a.tenant = t.tenant AND a.template_id = t.id AND a.parent_id IS NULL
         AND (a.type = ${v} OR a.value_type = ${v}))`,
    );
  }
  return conds.join(' AND ');
}

const orderBy = (sortByLabel: boolean, alias: string) => (sortByLabel ? `${alias}.label COLLATE "C", ${alias}.id` : `${alias}.id`);

/** The templates chosen by `where` (on `templates t`), with their attributes: one query. */
async function selectTemplates(db: Db, p: Params, where: string, sortByLabel: boolean, limit = ''): Promise<TemplateRecord[]> {
  // The tenant is always the first parameter.
  const { rows } = await db.query<TemplateRow>(
    `WITH p AS (SELECT t.id, t.label, t.created, t.updated, t.offline_after FROM templates t WHERE ${where} ORDER BY ${orderBy(sortByLabel, 't')} ${limit})
     SELECT p.id, p.label, ${registryTimeSql('p.created')} AS created, ${registryTimeSql('p.updated')} AS updated, p.offline_after, ${ATTR_COLUMNS}
     FROM p LEFT JOIN template_attrs a ON a.tenant = $1 AND a.template_id = p.id
     ORDER BY ${orderBy(sortByLabel, 'p')}, a.id`,
    p.values,
  );
  return group(rows);
}

function group(rows: TemplateRow[]): TemplateRecord[] {
  const out: TemplateRecord[] = [];
  let start = 0;
  for (let i = 1; i <= rows.length; i++) {
    if (i < rows.length && rows[i]!.id === rows[start]!.id) continue;
    const r = rows[start]!;
    out.push({
      id: r.id,
      label: r.label,
      created: r.created,
      updated: r.updated,
      offlineAfter: r.offline_after,
      attrs: nestAttrs(rows.slice(start, i)),
    });
    start = i;
  }
  return out;
}

/** The ids of one page, in page order (the lists take each template from the view cache). */
export async function listTemplatePageIds(db: Db, tenant: string, f: ListFilters, page: Page): Promise<number[]> {
  const p = new Params();
  const where = listWhere(tenant, f, p);
  const { rows } = await db.query<{ id: number }>(
    `SELECT t.id FROM templates t WHERE ${where} ORDER BY ${orderBy(f.sortByLabel, 't')} LIMIT ${p.add(page.size)} OFFSET ${p.add(page.offset)}`,
    p.values,
  );
  return rows.map((r) => r.id);
}

export async function countTemplates(db: Db, tenant: string, f: ListFilters): Promise<number> {
  const p = new Params();
  const { rows } = await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM templates t WHERE ${listWhere(tenant, f, p)}`, p.values);
  return rows[0]!.n;
}

export async function getTemplates(db: Db, tenant: string, ids: number[]): Promise<TemplateRecord[]> {
  const p = new Params();
  const where = `t.tenant = ${p.add(tenant)} AND t.id = ANY(${p.add(ids)}::bigint[])`;
  return selectTemplates(db, p, where, false);
}

export async function getAllTemplates(db: Db, tenant: string): Promise<TemplateRecord[]> {
  const p = new Params();
  return selectTemplates(db, p, `t.tenant = ${p.add(tenant)}`, false);
}

/** Locks the template row against concurrent updates, deletions and device changes using it. */
export async function lockTemplate(db: Db, tenant: string, id: number): Promise<boolean> {
  const { rowCount } = await db.query('SELECT 1 FROM templates WHERE tenant = $1 AND id = $2 FOR UPDATE', [tenant, id]);
  return rowCount === 1;
}

/**
 * Locks the template and every other template a device built from it also has (FOR UPDATE, in
 * id order, as device creation and DELETE /template lock: never a deadlock), so two updates
 * that would give one device a repeated label cannot both pass `labelsClashOnDevices`, each
 * before the other committed. Returns whether the template exists.
 *
 * The neighbours are read again until a read finds no new one: the first statement's snapshot
 * is taken before it waits for the template's row lock, so a device creation or update holding
 * the template FOR SHARE at that moment (and giving a device this template and another) is not
 * in it. Once the template is locked no device can start using it, so a read begun after the
 * lock sees every neighbour (before, found by an audit: PUT of two templates at once, each
 * adding label `y`, both during a POST /device from both, all three answered 200 and every
 * device had `y` twice).
 */
export async function lockTemplateAndNeighbours(db: Db, tenant: string, id: number): Promise<boolean> {
  let locked = new Set<string>();
  for (;;) {
    const { rows } = await db.query<{ id: string }>(
      `SELECT id::text FROM templates
        WHERE tenant = $1
          AND (id = $2 OR id IN (SELECT other.template_id FROM device_templates dt
                                   JOIN device_templates other ON other.tenant = dt.tenant AND other.device_id = dt.device_id
                                  WHERE dt.tenant = $1 AND dt.template_id = $2))
        ORDER BY id FOR UPDATE`,
      [tenant, id],
    );
    if (!rows.some((r) => r.id === String(id))) return false;
    // Locks are kept until commit: a neighbour read before and gone now stays locked, harmlessly.
    if (rows.every((r) => locked.has(r.id))) return true;
    locked = new Set([...locked, ...rows.map((r) => r.id)]);
  }
}

export async function insertTemplate(db: Db, tenant: string, label: string, offlineAfter: number | null): Promise<number> {
  const { rows } = await db.query<{ id: number }>('INSERT INTO templates (tenant, label, offline_after) VALUES ($1, $2, $3) RETURNING id', [
    tenant,
    label,
    offlineAfter,
  ]);
  return rows[0]!.id;
}

export async function setTemplateLabel(db: Db, tenant: string, id: number, label: string, offlineAfter: number | null): Promise<void> {
  await db.query('UPDATE templates SET label = $3, offline_after = $4, updated = now() WHERE tenant = $1 AND id = $2', [
    tenant,
    id,
    label,
    offlineAfter,
  ]);
}

/** `n` fresh attribute ids, ascending, so that ids follow the order of the input. */
export async function reserveAttrIds(db: Db, n: number): Promise<number[]> {
  if (n === 0) return [];
  const { rows } = await db.query<{ id: number }>("SELECT nextval('attr_ids') AS id FROM generate_series(1, $1)", [n]);
  return rows.map((r) => r.id).sort((a, b) => a - b);
}

/** One statement for all rows; metadata may reference attributes inserted by the same statement. */
export async function insertAttrs(db: Db, tenant: string, templateId: number, rows: NewAttrRow[]): Promise<void> {
  if (rows.length === 0) return;
  await db.query(
    `INSERT INTO template_attrs (tenant, id, template_id, parent_id, label, type, value_type, static_value)
     SELECT $1, u.id, $2, u.parent_id, u.label, u.type, u.value_type, u.static_value
     FROM unnest($3::bigint[], $4::bigint[], $5::text[], $6::text[], $7::text[], $8::text[])
       AS u(id, parent_id, label, type, value_type, static_value)`,
    [
      tenant,
      templateId,
      rows.map((r) => r.id),
      rows.map((r) => r.parentId),
      rows.map((r) => r.label),
      rows.map((r) => r.type),
      rows.map((r) => r.valueType),
      rows.map((r) => r.staticValue),
    ],
  );
}

/** Kept attributes get their new value type and value; `updated` is set where one changed. */
export async function changeAttrs(db: Db, tenant: string, changes: AttrChange[]): Promise<void> {
  if (changes.length === 0) return;
  await db.query(
    `UPDATE template_attrs a SET value_type = u.value_type, static_value = u.static_value, updated = now()
     FROM unnest($2::bigint[], $3::text[], $4::text[]) AS u(id, value_type, static_value)
     WHERE a.tenant = $1 AND a.id = u.id
       AND (a.value_type IS DISTINCT FROM u.value_type OR a.static_value IS DISTINCT FROM u.static_value)`,
    [tenant, changes.map((c) => c.id), changes.map((c) => c.valueType), changes.map((c) => c.staticValue)],
  );
}

/** Removes attributes; their metadata, overrides and keys go with them (ON DELETE CASCADE). */
export async function deleteAttrs(db: Db, tenant: string, ids: number[]): Promise<void> {
  if (ids.length === 0) return;
  await db.query('DELETE FROM template_attrs WHERE tenant = $1 AND id = ANY($2::bigint[])', [tenant, ids]);
}

/** Removes the generated keys of attributes (their value type is no longer `psk`). */
export async function deleteKeysOf(db: Db, tenant: string, attrIds: number[]): Promise<void> {
  if (attrIds.length === 0) return;
  await db.query('DELETE FROM device_psks WHERE tenant = $1 AND attr_id = ANY($2::bigint[])', [tenant, attrIds]);
}

/**
 * Whether a device built from `templateId` has, in another of its templates, a top-level
 * attribute labelled like one of `labels`.
 */
export async function labelsClashOnDevices(db: Db, tenant: string, templateId: number, labels: string[]): Promise<boolean> {
  if (labels.length === 0) return false;
  const { rowCount } = await db.query(
    `SELECT 1 FROM device_templates dt
     JOIN device_templates other ON other.tenant = dt.tenant AND other.device_id = dt.device_id AND other.template_id <> dt.template_id
     JOIN template_attrs a ON a.tenant = other.tenant AND a.template_id = other.template_id AND a.parent_id IS NULL
     WHERE dt.tenant = $1 AND dt.template_id = $2 AND a.label = ANY($3::text[])
     LIMIT 1`,
    [tenant, templateId, labels],
  );
  return rowCount === 1;
}

export async function deleteTemplate(db: Db, tenant: string, id: number): Promise<void> {
  await db.query('DELETE FROM templates WHERE tenant = $1 AND id = $2', [tenant, id]);
}

/**
 * Locks every template of the tenant (DELETE /template), so no device starts using one meanwhile;
 * returns their ids, the only ones `deleteAllTemplates` may remove. A template created after this
 * statement's snapshot is not locked, and a device may be being created from it (not yet
 * visible to `anyTemplateInUse`): before, found by an audit, the deletion then waited for that
 * creation and removed the template under its new device, both answering 200.
 */
export async function lockAllTemplates(db: Db, tenant: string): Promise<string[]> {
  // In id order, as device creation locks its templates: the two never deadlock.
  const { rows } = await db.query<{ id: string }>('SELECT id::text FROM templates WHERE tenant = $1 ORDER BY id FOR UPDATE', [tenant]);
  return rows.map((r) => r.id);
}

export async function anyTemplateInUse(db: Db, tenant: string): Promise<boolean> {
  const { rowCount } = await db.query('SELECT 1 FROM device_templates WHERE tenant = $1 LIMIT 1', [tenant]);
  return rowCount === 1;
}

/** Removes the templates `lockAllTemplates` locked (and checked); returns the ids removed. */
export async function deleteAllTemplates(db: Db, tenant: string, locked: string[]): Promise<number[]> {
  const { rows } = await db.query<{ id: number }>('DELETE FROM templates WHERE tenant = $1 AND id = ANY($2::bigint[]) RETURNING id', [
    tenant,
    locked,
  ]);
  return rows.map((r) => r.id);
}

/** Up to `limit` devices built from a template (read before it is removed: its links go with it). */
export async function devicesOfTemplate(db: Db, tenant: string, templateId: number, limit: number): Promise<string[]> {
  const { rows } = await db.query<{ device_id: string }>(
    'SELECT device_id FROM device_templates WHERE tenant = $1 AND template_id = $2 ORDER BY device_id LIMIT $3',
    [tenant, templateId, limit],
  );
  return rows.map((r) => r.device_id);
}
