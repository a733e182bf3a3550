// Small pieces shared by the registry's SQL: numbered parameters, the label filter, the device
// check of the per-device endpoints. Values always travel as parameters; only fixed SQL text is
// concatenated.
import type pg from 'pg';
import { errors } from '../errors.js';
import type { ListFilters } from './paging.js';

/**
 * Throws the contract's 404 unless the tenant has device `id`; `lock`: the row is locked FOR
 * UPDATE until commit (the device's changes one at a time). An id with a NUL names no device
 * (PostgreSQL text cannot hold one).
 */
export async function requireDevice(db: pg.Pool | pg.PoolClient, tenant: string, id: string, lock: boolean): Promise<void> {
  if (!id.includes('\0')) {
    const { rowCount } = await db.query(`SELECT 1 FROM devices WHERE tenant = $1 AND id = $2${lock ? ' FOR UPDATE' : ''}`, [tenant, id]);
    if (rowCount === 1) return;
  }
  throw errors.noSuchDevice(id);
}

/** Collects parameter values and hands out their `$n` placeholders. */
export class Params {
  readonly values: unknown[] = [];
  add(value: unknown): string {
    this.values.push(value);
    return `$${this.values.length}`;
  }
}

/** A LIKE pattern matching text that starts with `s` literally. */
function likePrefix(s: string): string {
  return s.replace(/[\\%_]/g, '\\$&') + '%';
}

/** Reverses by code point, as PostgreSQL's reverse() does for UTF-8 text. */
function reversed(s: string): string {
  return [...s].reverse().join('');
}

/**
 * `column` starts or ends with `s` (case-sensitive, literal). Both halves are prefix matches in
 * byte order (COLLATE "C"), so the (tenant, label COLLATE "C") and (tenant, reverse(label)
 * COLLATE "C") indexes of sql/010 serve them.
 */
export function labelMatchSql(column: string, s: string, p: Params): string {
  return `(${column} COLLATE "C" LIKE ${p.add(likePrefix(s))} OR reverse(${column}) COLLATE "C" LIKE ${p.add(likePrefix(reversed(s)))})`;
}

/** A path id that names a template (a positive integer), or undefined (then: 404). */
export function parseTemplateId(raw: string | number): number | undefined {
  const s = String(raw);
  if (!/^\d{1,15}$/.test(s)) return undefined;
  const n = Number(s);
  return n > 0 ? n : undefined;
}

/** PostgreSQL text cannot hold NUL, so a filter value with one matches nothing (and must not reach SQL). */
export function filtersCanMatch(f: ListFilters): boolean {
  const values = [f.label ?? '', ...f.attrs.flatMap((a) => [a.label, a.value]), ...f.attrTypes];
  return !values.some((v) => v.includes('\0'));
}
