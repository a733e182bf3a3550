// Device rules: creation (ids, labels, overrides, one transaction), replacement, deletion, the
// cached public views of GET /device/{id}, and the registry event of each change (announced in
// its transaction: registry/events.ts).
import crypto from 'node:crypto';
import type pg from 'pg';
import { errors } from '../../errors.js';
import type { Page } from '../paging.js';
import type { AttrRecord } from '../attrs.js';
import type { RegistryEvent, RegistryEvents } from '../events.js';
import { filtersCanMatch, parseTemplateId, requireDevice } from '../sql.js';
import { countKey, ListCache, TenantCache } from '../tenant-cache.js';
import { CacheRenewal } from '../cache-renewal.js';
import type { ViewCacheCounts } from '../cache-metrics.js';
import { parseDeviceBody } from './input.js';
import * as repo from './repo.js';
import type { CreateOptions, DeviceInput, DeviceQuery, DeviceRecord, DeviceShape, OverrideRow } from './types.js';
import { deviceView } from './views.js';
import type { DeviceStatusBook } from './status.js';

const ID_TRIES = 10;
// Up to this many matches an attr= filter collects its devices as a set (docs/registry.md).
const SET_PLAN_MAX = 5000;
// Above this many ids an event names the tenant instead (caches drop the tenant).
const MAX_EVENT_IDS = 10_000;

/** 6 lowercase hex characters from the CSPRNG. */
export const randomDeviceId = (): string => crypto.randomBytes(3).toString('hex');

export interface DeviceOptions {
  /** Public device views kept in memory (serialised); 0: none. */
  cacheSize: number;
  /** The longest a cached view or list page is used (REGISTRY_CACHE_MAX_AGE_SECONDS). */
  cacheMaxAgeMs: number;
  /** Turns a sealed key into its text (internal views); absent: keys are not shown. */
  openKey?: (sealed: Buffer, place: { tenant: string; deviceId: string; attrId: number }) => string;
  /** Id generator; tests replace it to force collisions. */
  randomId?: () => string;
  /** last_seen and status of the GET views, and the status filter (docs/live.md); absent: neither. */
  status?: DeviceStatusBook;
}

interface CachedView {
  json: string;
  templates: number[];
}

/** The public view of a device as the cache keeps it. */
const cachedView = (d: DeviceRecord): CachedView => ({ json: JSON.stringify(deviceView(d)), templates: d.templates.map((t) => t.id) });

export type CreateResult = { verbose: true; devices: DeviceRecord[] } | { verbose: false; devices: Array<{ id: string; label: string }> };

export class DeviceService {
  private readonly views: TenantCache<CachedView>;
  /** Match counts and pages (ids) of list requests. */
  private readonly lists: ListCache;
  private readonly renewal: CacheRenewal;
  private readonly randomId: () => string;

  constructor(
    private readonly pool: pg.Pool,
    private readonly events: RegistryEvents,
    private readonly opts: DeviceOptions,
  ) {
    this.views = new TenantCache(opts.cacheSize, opts.cacheMaxAgeMs);
    this.lists = new ListCache(opts.cacheMaxAgeMs);
    this.renewal = new CacheRenewal(this.views, opts.cacheMaxAgeMs, async (tenant, ids) => (await this.readViews(tenant, ids)).size);
    this.randomId = opts.randomId ?? randomDeviceId;
    events.on((e) => this.invalidate(e));
  }

  /** Stops renewing the cached views. */
  close(): void {
    this.renewal.stop();
  }

  /** Lookups of the view cache, entries renewed and kept (metrics). */
  viewCacheCounts(): ViewCacheCounts {
    return { hits: this.views.hits, misses: this.views.misses, renewed: this.renewal.renewed, entries: this.views.entries };
  }

  async create(tenant: string, opts: CreateOptions, body: unknown): Promise<CreateResult> {
    const input = parseDeviceBody(body, true);
    if (input.id !== undefined && opts.count > 1) throw errors.deviceIdWithCount();
    // Taken before the transaction: cacheNewViews keeps the new views only if no other change
    // of the tenant came in meanwhile (the stamp then moved by our own event alone).
    const stamp = this.views.stamp(tenant);
    const result = await this.events.change(async (c, announce): Promise<CreateResult> => {
      const shape = await this.resolve(c, tenant, input);
      const ids = await this.insertWithIds(c, tenant, input.id, opts.count, shape);
      await announce(changedEvent(tenant, ids, 'created', shape.templates));
      if (opts.verbose) return { verbose: true as const, devices: await repo.getDevices(c, tenant, ids) };
      return { verbose: false as const, devices: ids.map((id, i) => ({ id, label: `${input.label}_${i}` })) };
    });
    await this.cacheNewViews(tenant, result.devices, this.views.advanced(stamp, 1));
    return result;
  }

  /**
   * Puts the views of devices just created into the view cache: the client reads them next, and
   * a miss costs a query (measured: ~1,000-2,000 GET /device/{id} a second while every read
   * misses, ~20,000 from the cache). The devices of one request differ only in id and label
   * (same templates, overrides and `created`, no keys, no `updated`), so one device is read and
   * the others' views are written from it. Kept only while `stamp` holds: any other change of
   * the tenant since before the transaction (one that could have touched these devices) and
   * nothing is kept; they are then read on demand. A failure here only means later misses.
   */
  private async cacheNewViews(tenant: string, devices: Array<{ id: string; label: string }>, stamp: string): Promise<void> {
    if (devices.length === 0 || devices.length > this.opts.cacheSize || this.views.stamp(tenant) !== stamp) return;
    try {
      const [first] = await repo.getDevices(this.pool, tenant, [devices[0]!.id]);
      if (!first) return;
      const { json, templates } = cachedView(first);
      const head = (d: { id: string; label: string }) => `{"id":${JSON.stringify(d.id)},"label":${JSON.stringify(d.label)},`;
      if (!json.startsWith(head(first))) return;
      const rest = json.slice(head(first).length);
      for (const d of devices) this.views.set(tenant, d.id, { json: head(d) + rest, templates }, stamp);
    } catch {
      // The database gone or the pool closing: the views are read on demand.
    }
  }

  /** The public view of one device as JSON text, from the cache when it is there. */
  async viewJson(tenant: string, id: string, withStatus = false): Promise<string> {
    const json = await this.storedViewJson(tenant, id);
    return withStatus ? this.withStatus(tenant, id, json) : json;
  }

  private async storedViewJson(tenant: string, id: string): Promise<string> {
    const hit = this.views.get(tenant, id);
    if (hit !== undefined) return hit.json;
    const json = id.includes('\0') ? undefined : (await this.readViews(tenant, [id])).get(id);
    if (json === undefined) throw errors.noSuchDevice(id);
    return json;
  }

  /** A GET view with `last_seen` and `status` (they change with every message: never cached). */
  /** `last_seen` and `status` of a device (an internal view adds them on request). */
  statusFields(tenant: string, id: string): { last_seen: string | null; status: 'online' | 'offline' } | undefined {
    return this.opts.status?.fields(tenant, id);
  }

  private withStatus(tenant: string, id: string, json: string): string {
    return this.opts.status ? this.opts.status.decorate(tenant, id, json) : json;
  }

  /** `status=online|offline` of a list request as a query condition; the book's pending times are written first. */
  async statusQuery(status: string | undefined): Promise<DeviceQuery['status']> {
    const book = this.opts.status;
    if (!book || (status !== 'online' && status !== 'offline')) return undefined;
    await book.flush();
    return { online: status === 'online', offlineAfterSeconds: book.offlineAfterSeconds, nowUs: Date.now() * 1000 };
  }

  /**
   * The public views of `ids` as JSON texts, in that order: from the cache, the misses read in
   * one query. A device removed since its id was read is left out.
   */
  private async viewsJson(tenant: string, ids: string[], withStatus: boolean): Promise<string[]> {
    const found = new Map<string, string>();
    const missing: string[] = [];
    for (const id of ids) {
      const hit = this.views.get(tenant, id);
      if (hit === undefined) missing.push(id);
      else found.set(id, hit.json);
    }
    if (missing.length > 0) for (const [id, json] of await this.readViews(tenant, missing)) found.set(id, json);
    return ids.flatMap((id) => {
      const json = found.get(id);
      if (json === undefined) return [];
      return [withStatus ? this.withStatus(tenant, id, json) : json];
    });
  }

  /** The views of `ids` read from the database (one query) and kept in the cache; by id. */
  private async readViews(tenant: string, ids: string[]): Promise<Map<string, string>> {
    const stamp = this.views.stamp(tenant);
    const read = new Map<string, string>();
    for (const d of await repo.getDevices(this.pool, tenant, ids)) {
      const view = cachedView(d);
      this.views.set(tenant, d.id, view, stamp);
      read.set(d.id, view.json);
    }
    return read;
  }

  /** One device with its keys opened (internal view). */
  async getInternal(tenant: string, id: string): Promise<DeviceRecord> {
    return this.openKeys(tenant, await this.find(tenant, id, true));
  }

  /**
   * A public page: the ids from the database, the views as JSON texts (`viewsJson`), and the
   * number of matches.
   */
  async listJson(tenant: string, q: DeviceQuery, page: Page): Promise<{ views: string[]; matches: number }> {
    if (!filtersCanMatch(q.filters)) return { views: [], matches: 0 };
    // A status filter's answer changes with time, not with registry events: never cached.
    const { items, matches } = q.status
      ? { items: await repo.listDevicePageIds(this.pool, tenant, q, page, 'set'), matches: await repo.countDevices(this.pool, tenant, q) }
      : await this.findPage(tenant, q, page, true, (plan) => repo.listDevicePageIds(this.pool, tenant, q, page, plan));
    return { views: await this.viewsJson(tenant, items, q.withStatus === true || q.status !== undefined), matches };
  }

  /** An internal page (keys opened) and the number of matches. */
  async listInternal(tenant: string, q: DeviceQuery, page: Page): Promise<{ devices: DeviceRecord[]; matches: number }> {
    if (!filtersCanMatch(q.filters)) return { devices: [], matches: 0 };
    // A status filter's answer changes with time, not with registry events: never cached.
    const { items, matches } = q.status
      ? { items: await repo.listDevices(this.pool, tenant, q, page, 'set', true), matches: await repo.countDevices(this.pool, tenant, q) }
      : await this.findPage(tenant, q, page, false, (plan) => repo.listDevices(this.pool, tenant, q, page, plan, true));
    return { devices: items.map((d) => this.openKeys(tenant, d)), matches };
  }

  /**
   * One page and the number of matches (counted only when neither the cache nor the page tells
   * it). `cachePage`: the page is of ids, kept and answered from the cache (ListCache).
   */
  private findPage<T>(
    tenant: string,
    q: DeviceQuery,
    page: Page,
    cachePage: boolean,
    fetch: (plan: repo.AttrPlan) => Promise<T[]>,
  ): Promise<{ items: T[]; matches: number }> {
    // With attr= filters the count comes first: few matches are found best as a set, many by
    // walking the devices in page order.
    return this.lists.page(tenant, {
      key: countKey(q.filters, String(q.templateId ?? '')),
      sortByLabel: q.filters.sortByLabel,
      page,
      fetchPage: (known) => fetch(known !== undefined && known <= SET_PLAN_MAX ? 'set' : 'walk'),
      count: () => repo.countDevices(this.pool, tenant, q),
      countFirst: q.filters.attrs.length > 0,
      cachePage,
    });
  }

  async listIds(tenant: string, q: DeviceQuery): Promise<string[]> {
    return filtersCanMatch(q.filters) ? repo.listDeviceIds(this.pool, tenant, q) : [];
  }

  /** PUT /device/{id}: the body is checked before the device is looked up. */
  async update(tenant: string, id: string, body: unknown): Promise<DeviceRecord> {
    const input = parseDeviceBody(body, false);
    return this.events.change(async (c, announce) => {
      await requireDevice(c, tenant, id, true);
      const shape = await this.resolve(c, tenant, input);
      await repo.replaceDevice(c, tenant, id, shape);
      await announce(changedEvent(tenant, [id], 'updated', shape.templates));
      return (await repo.getDevices(c, tenant, [id]))[0]!;
    });
  }

  async remove(tenant: string, id: string): Promise<DeviceRecord> {
    return this.events.change(async (c, announce) => {
      await requireDevice(c, tenant, id, true);
      const d = (await repo.getDevices(c, tenant, [id]))[0]!;
      await repo.deleteDevice(c, tenant, id);
      await announce(removedEvent(tenant, [id]));
      return d;
    });
  }

  async removeAll(tenant: string): Promise<DeviceRecord[]> {
    const { views, ids } = await this.events.change(async (c, announce) => {
      const locked = await repo.lockAllDevices(c, tenant);
      const all = await repo.getAllDevices(c, tenant);
      const deleted = await repo.deleteAllDevices(c, tenant, locked);
      if (deleted.length > 0) await announce(removedEvent(tenant, deleted));
      return { views: all, ids: deleted };
    });
    const gone = new Set(ids);
    return views.filter((d) => gone.has(d.id));
  }

  /**
   * The device's templates (locked against change until commit) and its overrides, checked in
   * order: unknown templates (404), repeated labels, then the override list.
   */
  private async resolve(c: pg.PoolClient, tenant: string, input: DeviceInput): Promise<DeviceShape> {
    const wanted = new Map<number, string>();
    for (const raw of input.templates) {
      const id = parseTemplateId(raw);
      if (id === undefined) throw errors.noSuchTemplate(raw);
      if (!wanted.has(id)) wanted.set(id, raw);
    }
    const templates = [...wanted.keys()];
    const found = await repo.lockTemplates(c, tenant, templates);
    for (const [id, raw] of wanted) if (!found.has(id)) throw errors.noSuchTemplate(raw);
    const attrs = await repo.templateAttrs(c, tenant, templates);
    const all = [...attrs.values()].flat();
    if (new Set(all.map((a) => a.label)).size !== all.length) throw errors.repeatedAttributes();

    const overrides: OverrideRow[] = [];
    const override = (a: AttrRecord, value: string | undefined) => {
      if (value !== undefined && value !== a.staticValue) overrides.push({ attrId: a.id, value });
    };
    const seen = new Set<number>();
    for (const o of input.overrides) {
      let scope = all;
      if (o.templateId !== undefined) {
        const tid = parseTemplateId(o.templateId);
        const inTemplate = tid === undefined ? undefined : attrs.get(tid);
        if (!inTemplate) throw errors.unknownTemplateInAttrList(o.templateId);
        scope = inTemplate;
      }
      const attr = o.id !== undefined ? scope.find((a) => a.id === Number(o.id)) : scope.find((a) => a.label === o.label);
      if (!attr) throw errors.unknownOverrideAttr(o.id ?? o.label);
      // One entry per attribute and per metadata attribute: a second would be a repeated attribute.
      if (seen.has(attr.id)) throw errors.repeatedAttributes();
      seen.add(attr.id);
      // A key is only ever set by gen_psk or a key copy, where it is encrypted and kept out of the public views.
      if (attr.valueType === 'psk' && o.staticValue !== undefined) throw errors.pskOverride(attr.label);
      override(attr, o.staticValue);
      for (const m of o.metadata) {
        const meta = attr.metadata.find((x) => x.id === Number(m.id));
        if (!meta) throw errors.unknownOverrideMetadata(m.id);
        if (seen.has(meta.id)) throw errors.repeatedAttributes();
        seen.add(meta.id);
        // A psk metadata attribute's value is a key too: no view shows an override of it, so one
        // would be stored (in clear) and never seen.
        if (meta.valueType === 'psk' && m.staticValue !== undefined) throw errors.pskMetadataOverride(meta.label);
        override(meta, m.staticValue);
      }
    }
    return { label: input.label, templates: templates.sort((a, b) => a - b), overrides };
  }

  /** Inserts the devices, drawing ids until each is free (at most ID_TRIES draws per device). */
  private async insertWithIds(
    c: pg.PoolClient,
    tenant: string,
    id: string | undefined,
    count: number,
    shape: DeviceShape,
  ): Promise<string[]> {
    if (id !== undefined) {
      const inserted = await repo.insertDevices(c, tenant, [id], [0], shape);
      if (!inserted.has(id)) throw errors.deviceIdInUse(id);
      return [id];
    }
    const ids = new Array<string>(count);
    let pending = Array.from({ length: count }, (_, i) => i);
    for (let attempt = 0; attempt < ID_TRIES && pending.length > 0; attempt++) {
      const next: number[] = [];
      const batch: string[] = [];
      const indexes: number[] = [];
      const drawn = new Set<string>();
      for (const index of pending) {
        const id = this.randomId();
        // A draw repeating another of this round counts as a collision: drawn again next round.
        if (drawn.has(id)) next.push(index);
        else {
          drawn.add(id);
          batch.push(id);
          indexes.push(index);
        }
      }
      // In id order: concurrent creations drawing the same ids then wait on each other in one
      // order instead of deadlocking (inTransaction retries a deadlock that still happens).
      sortTogether(batch, indexes);
      const inserted = await repo.insertDevices(c, tenant, batch, indexes, shape);
      batch.forEach((id, i) => (inserted.has(id) ? (ids[indexes[i]!] = id) : next.push(indexes[i]!)));
      pending = next;
    }
    if (pending.length > 0) throw errors.deviceIdGenerationFailed();
    return ids;
  }

  private async find(tenant: string, id: string, withKeys: boolean): Promise<DeviceRecord> {
    const d = id.includes('\0') ? undefined : (await repo.getDevices(this.pool, tenant, [id], withKeys))[0];
    if (!d) throw errors.noSuchDevice(id);
    return d;
  }

  private openKeys(tenant: string, d: DeviceRecord): DeviceRecord {
    const open = this.opts.openKey;
    for (const t of d.templates) {
      for (const a of t.attrs as repo.SealedAttr[]) {
        try {
          if (a.sealed && open) a.key = open(a.sealed, { tenant, deviceId: d.id, attrId: a.id });
        } catch {
          // Sealed under another PSK_ENCRYPTION_KEY: shown as having no key rather than failing the view.
        }
        delete a.sealed;
      }
    }
    return d;
  }

  private invalidate(e: RegistryEvent): void {
    switch (e.type) {
      case 'devices.changed':
      case 'devices.removed':
        this.views.delete(e.tenant, e.deviceIds);
        this.lists.dropTenant(e.tenant);
        break;
      case 'templates.changed': {
        const changed = new Set(e.templateIds);
        this.views.deleteWhere(e.tenant, (v) => v.templates.some((t) => changed.has(t)));
        this.lists.dropTenant(e.tenant);
        break;
      }
      case 'tenant.changed':
        this.views.dropTenant(e.tenant);
        this.lists.dropTenant(e.tenant);
        break;
    }
  }
}

const changedEvent = (tenant: string, deviceIds: string[], action: 'created' | 'updated', templateIds: number[]): RegistryEvent =>
  deviceIds.length > MAX_EVENT_IDS
    ? { type: 'tenant.changed', tenant }
    : { type: 'devices.changed', tenant, deviceIds, action, templateIds };

/** Always precise: the MQTT sessions of exactly these devices are closed. */
const removedEvent = (tenant: string, deviceIds: string[]): RegistryEvent => ({ type: 'devices.removed', tenant, deviceIds });

/** Sorts `ids` ascending and `indexes` along with them. */
function sortTogether(ids: string[], indexes: number[]): void {
  const order = ids.map((id, i) => [id, indexes[i]!] as const).sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
  order.forEach(([id, index], i) => {
    ids[i] = id;
    indexes[i] = index;
  });
}
