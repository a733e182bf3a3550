// Template rules: input checks, identity-keeping updates, deletion rules, and the registry
// event of each change, announced in its transaction (registry/events.ts), that tells caches
// (device views, ingest shards, other instances) what changed.
import type pg from 'pg';
import { errors } from '../../errors.js';
import type { ListFilters, Page } from '../paging.js';
import type { AttrRecord } from '../attrs.js';
import { fitsOneNotification, type Announce, type RegistryEvent, type RegistryEvents } from '../events.js';
import { filtersCanMatch, parseTemplateId } from '../sql.js';
import { countKey, ListCache, TenantCache } from '../tenant-cache.js';
import { CacheRenewal } from '../cache-renewal.js';
import type { ViewCacheCounts } from '../cache-metrics.js';
import { parseTemplateInput } from './input.js';
import * as repo from './repo.js';
import type { AttrChange, AttrInput, NewAttrRow, TemplateRecord } from './types.js';
import { templateJson, type TemplateJson } from './views.js';

// Above this many ids a change event names the tenant instead (caches drop the tenant).
const MAX_EVENT_IDS = 1000;
const MAX_DEVICE_EVENT_IDS = 1000;

const identity = (a: { label: string; type: string }) => `${a.type}\u0000${a.label}`;

/** Rows for new attributes (ids in input order) and for new metadata of kept attributes. */
async function newRows(
  db: pg.PoolClient,
  attrs: AttrInput[],
  metaOfKept: Array<{ parentId: number; meta: AttrInput }>,
): Promise<NewAttrRow[]> {
  const count = attrs.reduce((n, a) => n + 1 + a.metadata.length, 0) + metaOfKept.length;
  const ids = await repo.reserveAttrIds(db, count);
  let next = 0;
  const rows: NewAttrRow[] = [];
  const row = (a: AttrInput, parentId: number | null): number => {
    const id = ids[next++]!;
    rows.push({ id, parentId, label: a.label, type: a.type, valueType: a.valueType, staticValue: a.staticValue });
    return id;
  };
  for (const a of attrs) {
    const id = row(a, null);
    for (const m of a.metadata) row(m, id);
  }
  for (const { parentId, meta } of metaOfKept) row(meta, parentId);
  return rows;
}

export class TemplateService {
  /** Match counts and pages of list requests: counting 100k templates costs ~10 ms, a page ~1 ms. */
  private readonly lists: ListCache;
  /** Serialised views by template id, for GET /template/{id} and the list pages. */
  private readonly views: TenantCache<TemplateJson>;
  private readonly renewal: CacheRenewal;

  constructor(
    private readonly pool: pg.Pool,
    private readonly events: RegistryEvents,
    cache: { cacheSize: number; cacheMaxAgeMs: number },
  ) {
    this.views = new TenantCache(cache.cacheSize, cache.cacheMaxAgeMs);
    this.lists = new ListCache(cache.cacheMaxAgeMs);
    this.renewal = new CacheRenewal(
      this.views,
      cache.cacheMaxAgeMs,
      async (tenant, ids) => (await this.readViews(tenant, ids.map(Number))).size,
    );
    events.on((e) => {
      if (e.type === 'templates.changed') this.views.delete(e.tenant, e.templateIds.map(String));
      if (e.type === 'tenant.changed') this.views.dropTenant(e.tenant);
      if (e.type === 'templates.changed' || e.type === 'tenant.changed') this.lists.dropTenant(e.tenant);
    });
  }

  /** Stops renewing the cached views. */
  close(): void {
    this.renewal.stop();
  }

  /** Lookups of the view cache, entries renewed and kept (metrics). */
  viewCacheCounts(): ViewCacheCounts {
    return { hits: this.views.hits, misses: this.views.misses, renewed: this.renewal.renewed, entries: this.views.entries };
  }

  async create(tenant: string, body: unknown): Promise<TemplateRecord> {
    const input = parseTemplateInput(body);
    const stamp = this.views.stamp(tenant);
    const created = await this.events.change(async (c, announce) => {
      const id = await repo.insertTemplate(c, tenant, input.label, input.offlineAfter);
      await repo.insertAttrs(c, tenant, id, await newRows(c, input.attrs, []));
      await announce(changedEvent(tenant, [id], 'created'));
      return (await repo.getTemplates(c, tenant, [id]))[0]!;
    });
    // The view as committed, for the reads that follow a creation; kept only if no other change
    // of the tenant came in since before the transaction (the stamp moved by our event alone).
    this.views.set(tenant, String(created.id), templateJson(created), this.views.advanced(stamp, 1));
    return created;
  }

  /** One page (views from the cache, page ids from the database) and the number of matches. */
  async list(tenant: string, filters: ListFilters, page: Page): Promise<{ templates: TemplateJson[]; matches: number }> {
    if (!filtersCanMatch(filters)) return { templates: [], matches: 0 };
    const { items, matches } = await this.lists.page(tenant, {
      key: countKey(filters),
      sortByLabel: filters.sortByLabel,
      page,
      fetchPage: () => repo.listTemplatePageIds(this.pool, tenant, filters, page),
      count: () => repo.countTemplates(this.pool, tenant, filters),
      cachePage: true,
    });
    return { templates: await this.viewsOf(tenant, items), matches };
  }

  async get(tenant: string, rawId: string): Promise<TemplateJson> {
    const id = parseTemplateId(rawId);
    const found = id === undefined ? undefined : (await this.viewsOf(tenant, [id]))[0];
    if (!found) throw errors.noSuchTemplate(rawId);
    return found;
  }

  /**
   * The views of `ids`, in that order: from the cache, the misses read in one query. A template
   * removed since its id was read is left out.
   */
  private async viewsOf(tenant: string, ids: number[]): Promise<TemplateJson[]> {
    const found = new Map<number, TemplateJson>();
    const missing: number[] = [];
    for (const id of ids) {
      const hit = this.views.get(tenant, String(id));
      if (hit === undefined) missing.push(id);
      else found.set(id, hit);
    }
    if (missing.length > 0) for (const [id, view] of await this.readViews(tenant, missing)) found.set(id, view);
    return ids.flatMap((id) => found.get(id) ?? []);
  }

  /** The views of `ids` read from the database (one query) and kept in the cache; by id. */
  private async readViews(tenant: string, ids: number[]): Promise<Map<number, TemplateJson>> {
    const stamp = this.views.stamp(tenant);
    const read = new Map<number, TemplateJson>();
    for (const t of await repo.getTemplates(this.pool, tenant, ids)) {
      const view = templateJson(t);
      this.views.set(tenant, String(t.id), view, stamp);
      read.set(t.id, view);
    }
    return read;
  }

  /**
   * Replaces label and attributes. An attribute whose (label, type) is still present keeps its
   * id, `created`, device overrides and keys; the others are removed with theirs. Metadata of a
   * kept attribute follow the same rule.
   */
  async update(tenant: string, rawId: string, body: unknown): Promise<TemplateRecord> {
    const input = parseTemplateInput(body);
    const id = parseTemplateId(rawId);
    if (id === undefined) throw errors.noSuchTemplate(rawId);
    return this.events.change(async (c, announce) => {
      if (!(await repo.lockTemplateAndNeighbours(c, tenant, id))) throw errors.noSuchTemplate(rawId);
      if (
        await repo.labelsClashOnDevices(
          c,
          tenant,
          id,
          input.attrs.map((a) => a.label),
        )
      )
        throw errors.repeatedAttributes();
      const current = (await repo.getTemplates(c, tenant, [id]))[0]!;
      const old = new Map(current.attrs.map((a) => [identity(a), a]));
      const removed: number[] = [];
      const changes: AttrChange[] = [];
      const keysDropped: number[] = [];
      const added: AttrInput[] = [];
      const metaOfKept: Array<{ parentId: number; meta: AttrInput }> = [];
      for (const a of input.attrs) {
        const kept = old.get(identity(a));
        if (!kept) {
          added.push(a);
          continue;
        }
        old.delete(identity(a));
        changes.push({ id: kept.id, valueType: a.valueType, staticValue: a.staticValue });
        if (kept.valueType === 'psk' && a.valueType !== 'psk') keysDropped.push(kept.id);
        const oldMeta = new Map(kept.metadata.map((m) => [identity(m), m]));
        for (const m of a.metadata) {
          const keptMeta = oldMeta.get(identity(m));
          if (keptMeta) {
            oldMeta.delete(identity(m));
            changes.push({ id: keptMeta.id, valueType: m.valueType, staticValue: m.staticValue });
          } else {
            metaOfKept.push({ parentId: kept.id, meta: m });
          }
        }
        removed.push(...[...oldMeta.values()].map((m: AttrRecord) => m.id));
      }
      removed.push(...[...old.values()].map((a) => a.id));
      await repo.deleteAttrs(c, tenant, removed);
      await repo.deleteKeysOf(c, tenant, keysDropped);
      await repo.changeAttrs(c, tenant, changes);
      await repo.insertAttrs(c, tenant, id, await newRows(c, added, metaOfKept));
      await repo.setTemplateLabel(c, tenant, id, input.label, input.offlineAfter);
      await announce(changedEvent(tenant, [id], 'updated'));
      await announceDevices(announce, tenant, await repo.devicesOfTemplate(c, tenant, id, MAX_DEVICE_EVENT_IDS + 1));
      return (await repo.getTemplates(c, tenant, [id]))[0]!;
    });
  }

  /** Removes the template; devices built from it lose it and its attributes (with overrides and keys). */
  async remove(tenant: string, rawId: string): Promise<TemplateRecord> {
    const id = parseTemplateId(rawId);
    if (id === undefined) throw errors.noSuchTemplate(rawId);
    return this.events.change(async (c, announce) => {
      if (!(await repo.lockTemplate(c, tenant, id))) throw errors.noSuchTemplate(rawId);
      const found = (await repo.getTemplates(c, tenant, [id]))[0]!;
      const devices = await repo.devicesOfTemplate(c, tenant, id, MAX_DEVICE_EVENT_IDS + 1);
      await repo.deleteTemplate(c, tenant, id);
      await announce(changedEvent(tenant, [id], 'removed'));
      await announceDevices(announce, tenant, devices);
      return found;
    });
  }

  /** Removes every template of the tenant, or none when any is used by a device. */
  async removeAll(tenant: string): Promise<TemplateRecord[]> {
    const { all, ids } = await this.events.change(async (c, announce) => {
      const locked = await repo.lockAllTemplates(c, tenant);
      if (await repo.anyTemplateInUse(c, tenant)) throw errors.templatesInUse();
      const all = await repo.getAllTemplates(c, tenant);
      const deleted = await repo.deleteAllTemplates(c, tenant, locked);
      if (deleted.length > 0) await announce(changedEvent(tenant, deleted, 'removed'));
      return { all, ids: deleted };
    });
    const gone = new Set(ids);
    return all.filter((t) => gone.has(t.id));
  }
}

/**
 * The devices built from a changed (or removed) template changed too: named, for the live
 * stream's device filters, when they are few enough to go to the other instances as they are
 * (MAX_DEVICE_EVENT_IDS, one notification); beyond, the template's event stands for them, rather
 * than a tenant-wide one that would drop every cache of the tenant.
 */
async function announceDevices(announce: Announce, tenant: string, deviceIds: string[]): Promise<void> {
  const event: RegistryEvent = { type: 'devices.changed', tenant, deviceIds, action: 'updated' };
  if (deviceIds.length > 0 && deviceIds.length <= MAX_DEVICE_EVENT_IDS && fitsOneNotification(event)) await announce(event);
}

const changedEvent = (tenant: string, templateIds: number[], action: 'created' | 'updated' | 'removed'): RegistryEvent =>
  templateIds.length > MAX_EVENT_IDS ? { type: 'tenant.changed', tenant } : { type: 'templates.changed', tenant, templateIds, action };
