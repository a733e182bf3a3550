import type { ListFilters, Page } from './paging.js';

// A bounded in-memory cache of values per tenant, dropped by registry events. A reader takes a
// stamp before it reads the database and hands it back with the value: if an invalidation came
// in between, the value may predate the change and is not kept. So a committed change (whose
// event is delivered after the commit) is never hidden by a cached value. Should an event be
// missed all the same (another instance's, lost with the listening connection), no value is
// used longer than `maxAgeMs` after it was kept. Entries read meanwhile are read again before
// they expire (`dueForRenewal`, used by CacheRenewal), so a hot entry never waits for the database.

interface Entry<V> {
  value: V;
  /** performance.now() when it was kept. */
  at: number;
  /** Read since it was kept. */
  used: boolean;
}

export class TenantCache<V> {
  private readonly tenants = new Map<string, Map<string, Entry<V>>>();
  private readonly generations = new Map<string, number>();
  private epoch = 0;
  private size = 0;
  /** Lookups answered from the cache, and not (metrics). */
  hits = 0;
  misses = 0;

  constructor(
    private readonly maxEntries: number,
    private readonly maxAgeMs: number,
  ) {}

  get(tenant: string, key: string): V | undefined {
    const entries = this.tenants.get(tenant);
    const entry = entries?.get(key);
    if (entry && performance.now() - entry.at <= this.maxAgeMs) {
      entry.used = true;
      this.hits++;
      return entry.value;
    }
    this.misses++;
    if (entry) {
      entries!.delete(key);
      this.size--;
    }
    return undefined;
  }

  /**
   * The keys, by tenant, of the entries read since they were kept and now older than `ageMs`
   * (and still within the maximum age): what a renewal reads again before they expire.
   */
  dueForRenewal(ageMs: number): Map<string, string[]> {
    const due = new Map<string, string[]>();
    const now = performance.now();
    for (const [tenant, entries] of this.tenants) {
      const keys: string[] = [];
      // In order of age: the first entry younger than `ageMs` ends the walk.
      for (const [key, e] of entries) {
        if (now - e.at < ageMs) break;
        if (e.used && now - e.at <= this.maxAgeMs) keys.push(key);
      }
      if (keys.length > 0) due.set(tenant, keys);
    }
    return due;
  }

  /** Take before reading the value from the database. */
  stamp(tenant: string): string {
    return `${this.epoch}:${this.generations.get(tenant) ?? 0}`;
  }

  /** `stamp` as it will be after `events` invalidations of the tenant (and none of all). */
  advanced(stamp: string, events: number): string {
    const [epoch, generation] = stamp.split(':');
    return `${epoch}:${Number(generation) + events}`;
  }

  set(tenant: string, key: string, value: V, stamp: string): void {
    if (this.maxEntries <= 0 || stamp !== this.stamp(tenant)) return;
    let entries = this.tenants.get(tenant);
    if (!entries) this.tenants.set(tenant, (entries = new Map<string, Entry<V>>()));
    // Deleted first, so the map's order stays the order of age (eviction takes the first).
    if (entries.delete(key)) this.size--;
    entries.set(key, { value, at: performance.now(), used: false });
    this.size++;
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
    for (const [k, e] of entries) {
      if (test(e.value)) {
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

/** Pages longer than this are not kept (bounds the memory: 5,000 pages of 100 ids). */
const MAX_CACHED_PAGE = 100;

export interface ListPage<T> {
  items: T[];
  matches: number;
}

export interface PageRequest<T> {
  /** `countKey` of the filters. */
  key: string;
  sortByLabel: boolean;
  page: Page;
  /** Reads the page; told the number of matches when it is known. */
  fetchPage: (matches: number | undefined) => Promise<T[]>;
  count: () => Promise<number>;
  /** Count before reading the page (the page then chooses its plan by the count). */
  countFirst?: boolean;
  /** Keep the page and answer it from the cache (pages of ids only, never of records). */
  cachePage?: boolean;
}

/**
 * What the list requests of one registry found, per tenant: the number of matches by filters,
 * and recent pages of ids by filters, order and position. Dashboards read the same pages again
 * and again; a repeated page then costs no query. Both are dropped together by every registry
 * event of the tenant (`dropTenant`), with the stamp rule above.
 */
export class ListCache {
  private readonly counts: TenantCache<number>;
  private readonly pages: TenantCache<ListPage<unknown>>;
  /**
   * Reads under way, by tenant, stamps and key: requests that miss the cache together share one
   * query (a count of 100,000 matches asked by 50 clients at once is counted once, not 50 times).
   * The stamps are part of the key, so a request that comes after an invalidation never shares
   * a read that began before it.
   */
  private readonly reading = new Map<string, Promise<unknown>>();

  constructor(maxAgeMs: number) {
    this.counts = new TenantCache(10_000, maxAgeMs);
    this.pages = new TenantCache(5_000, maxAgeMs);
  }

  dropTenant(tenant: string): void {
    this.counts.dropTenant(tenant);
    this.pages.dropTenant(tenant);
  }

  /**
   * One page of a list and the number of matches: the cached page when there is one; else the
   * page from `fetchPage`, with the count from the cache when known (a page past it needs no
   * query), from the page itself when it is partial, else from `count()`.
   */
  async page<T>(tenant: string, r: PageRequest<T>): Promise<ListPage<T>> {
    const pageKey = `${r.key}|${r.sortByLabel ? 'label' : 'id'}|${r.page.size}|${r.page.offset}`;
    if (!r.cachePage) return this.read(tenant, r, pageKey);
    const cached = this.pages.get(tenant, pageKey);
    if (cached) return cached as ListPage<T>;
    return this.once(`page|${tenant}|${this.pages.stamp(tenant)}|${this.counts.stamp(tenant)}|${pageKey}`, () =>
      this.read(tenant, r, pageKey),
    );
  }

  private async read<T>(tenant: string, r: PageRequest<T>, pageKey: string): Promise<ListPage<T>> {
    const countStamp = this.counts.stamp(tenant);
    const pageStamp = this.pages.stamp(tenant);
    const count = () => this.once(`count|${tenant}|${countStamp}|${r.key}`, r.count);
    let matches = this.counts.get(tenant, r.key);
    if (matches === undefined && r.countFirst) {
      matches = await count();
      this.counts.set(tenant, r.key, matches, countStamp);
    }
    if (matches !== undefined && r.page.offset >= matches) return { items: [], matches };
    const items = await r.fetchPage(matches);
    if (matches === undefined) {
      const partial = items.length > 0 && items.length < r.page.size;
      matches = partial ? r.page.offset + items.length : await count();
      this.counts.set(tenant, r.key, matches, countStamp);
    }
    if (r.cachePage && items.length <= MAX_CACHED_PAGE) this.pages.set(tenant, pageKey, { items, matches }, pageStamp);
    return { items, matches };
  }

  /** `load()`, or the same load already under way for `key`. */
  private once<R>(key: string, load: () => Promise<R>): Promise<R> {
    const running = this.reading.get(key);
    if (running) return running as Promise<R>;
    const p = load().finally(() => this.reading.delete(key));
    this.reading.set(key, p);
    return p;
  }
}
