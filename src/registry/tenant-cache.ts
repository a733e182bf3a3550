import type { ListFilters, Page } from '../http/query.js';

// A bounded in-memory cache of values per tenant, dropped by registry events. A reader takes a
// stamp before it reads the database and hands it back with the value: if an invalidation came
// in between, the value may predate the change and is not kept. So a committed change (whose
// event is published after the commit) is never hidden by a cached value.

export class TenantCache<V> {
  private readonly tenants = new Map<string, Map<string, V>>();
  private readonly generations = new Map<string, number>();
  private epoch = 0;
  private size = 0;

  constructor(private readonly maxEntries: number) {}

  get(tenant: string, key: string): V | undefined {
    return this.tenants.get(tenant)?.get(key);
  }

  /** Take before reading the value from the database. */
  stamp(tenant: string): string {
    return `${this.epoch}:${this.generations.get(tenant) ?? 0}`;
  }

  set(tenant: string, key: string, value: V, stamp: string): void {
    if (this.maxEntries <= 0 || stamp !== this.stamp(tenant)) return;
    let entries = this.tenants.get(tenant);
    if (!entries) this.tenants.set(tenant, (entries = new Map()));
    if (!entries.has(key)) this.size++;
    entries.set(key, value);
    while (this.size > this.maxEntries) this.evictOne();
  }

  delete(tenant: string, keys: Iterable<string>): void {
    this.bump(tenant);
    const entries = this.tenants.get(tenant);
    if (!entries) return;
    for (const k of keys) if (entries.delete(k)) this.size--;
  }

  /** Drops the tenant's entries for which `test` holds. */
  deleteWhere(tenant: string, test: (value: V) => boolean): void {
    this.bump(tenant);
    const entries = this.tenants.get(tenant);
    if (!entries) return;
    for (const [k, v] of entries) {
      if (test(v)) {
        entries.delete(k);
        this.size--;
      }
    }
  }

  dropTenant(tenant: string): void {
    if (tenant === '*') return this.clear();
    this.bump(tenant);
    const entries = this.tenants.get(tenant);
    if (!entries) return;
    this.size -= entries.size;
    this.tenants.delete(tenant);
  }

  clear(): void {
    this.epoch++;
    this.tenants.clear();
    this.size = 0;
  }

  get entries(): number {
    return this.size;
  }

  private bump(tenant: string): void {
    this.generations.set(tenant, (this.generations.get(tenant) ?? 0) + 1);
  }

  /** The oldest entry of the tenant that was cached first. */
  private evictOne(): void {
    for (const [tenant, entries] of this.tenants) {
      const first = entries.keys().next();
      if (!first.done) {
        entries.delete(first.value);
        this.size--;
      }
      if (entries.size === 0) this.tenants.delete(tenant);
      return;
    }
  }
}

/** The key of a list request's count: its filters (sorting and paging do not change it). */
export const countKey = (f: ListFilters, scope = ''): string => JSON.stringify([scope, f.label ?? null, f.attrs, f.attrTypes]);

/**
 * One page of a list and the number of matches. The count comes from `counts` when known (and a
 * page past it needs no query), from the page itself when it is partial, else from `count()`.
 * `countFirst`: the count is taken before the page, which is then told it (to choose a plan).
 */
export async function countedPage<T>(
  counts: TenantCache<number>,
  tenant: string,
  key: string,
  page: Page,
  fetchPage: (matches: number | undefined) => Promise<T[]>,
  count: () => Promise<number>,
  countFirst = false,
): Promise<{ items: T[]; matches: number }> {
  const stamp = counts.stamp(tenant);
  let matches = counts.get(tenant, key);
  if (matches === undefined && countFirst) {
    matches = await count();
    counts.set(tenant, key, matches, stamp);
  }
  if (matches !== undefined && page.offset >= matches) return { items: [], matches };
  const items = await fetchPage(matches);
  if (matches === undefined) {
    const partial = items.length > 0 && items.length < page.size;
    matches = partial ? page.offset + items.length : await count();
    counts.set(tenant, key, matches, stamp);
  }
  return { items, matches };
}
