// A shard worker's cache of its devices: a model per known device, `null` for a device that
// does not exist (so a flood from an unknown device costs one query, not one per message).
// Misses are loaded in one query per batch. Registry events drop entries; a load that was
// running while an event arrived is used for its batch but not cached, because it may have
// read the registry before the change committed.
//
// Events can be missed (another instance's, while the listening connection was down), so two
// more rules bound what a missed event can cost:
//   - no entry is used longer than `maxAgeMs` (REGISTRY_CACHE_MAX_AGE_SECONDS) after its load;
//   - a message is not dropped on the word of an entry loaded more than RECHECK_AFTER_MS before
//     the message came in: an absent device is looked up again here, and the shard actor asks
//     `reload` before dropping a value of an attribute the model does not know (or of another
//     type). So a value is lost for a stale cache only if its attribute was added less than a
//     second before the message came in and the change's notification was lost as well; and a
//     device sending a key it does not have costs at most one load a second.
import type { RegistryEvent } from '../registry/events.js';
import { deviceKey } from '../topics.js';
import type { DeviceModel } from './device-model.js';

export type DeviceLoader = (devices: Array<{ tenant: string; id: string }>) => Promise<Map<string, DeviceModel>>;

/** How much older than a message its device's entry may be before a drop is checked against the database. */
export const RECHECK_AFTER_MS = 1000;

/** Lookups since the previous report, and the devices cached now. */
export interface DeviceCacheStats {
  hits: number;
  misses: number;
  size: number;
}

/** The devices of one batch, by message index. */
export interface ResolvedBatch {
  model(i: number): DeviceModel | null;
  /** Whether message i's model was loaded more than RECHECK_AFTER_MS before the message came in. */
  stale(i: number): boolean;
}

interface Entry {
  model: DeviceModel | null;
  /** Date.now() when its load started: the model holds every change committed before. */
  loadedAt: number;
}

export class DeviceCache {
  private readonly entries = new Map<string, Entry>();
  private generation = 0;
  private hits = 0;
  private misses = 0;

  constructor(
    private readonly load: DeviceLoader,
    private readonly capacity: number,
    private readonly maxAgeMs: number,
  ) {}

  /** The stats since the previous call. */
  takeStats(): DeviceCacheStats {
    const stats = { hits: this.hits, misses: this.misses, size: this.entries.size };
    this.hits = 0;
    this.misses = 0;
    return stats;
  }

  /**
   * Models for every device key of a batch (`<tenant>/<id>`), `receivedUs` the messages' receive
   * times; misses (absent, too old, or absent on a stale word) are loaded in one query.
   */
  async resolve(keys: string[], receivedUs: Float64Array): Promise<ResolvedBatch> {
    const n = keys.length;
    const found = new Array<Entry | undefined>(n);
    const missing: string[] = [];
    const now = Date.now();
    for (let i = 0; i < n; i++) {
      const key = keys[i]!;
      const hit = this.entries.get(key);
      if (hit && now - hit.loadedAt <= this.maxAgeMs && (hit.model !== null || !isStale(hit, receivedUs[i]!))) {
        this.hits++;
        found[i] = hit;
      } else {
        this.misses++;
        missing.push(key);
      }
    }
    const loaded = missing.length === 0 ? undefined : await this.fetch(missing);
    return {
      model: (i) => (found[i] ?? loaded!.get(keys[i]!)!).model,
      stale: (i) => isStale(found[i] ?? loaded!.get(keys[i]!)!, receivedUs[i]!),
    };
  }

  /** Loads `keys` from the database, whatever is cached: the models now, cached for what follows. */
  async reload(keys: string[]): Promise<(key: string) => DeviceModel | null> {
    this.misses += keys.length;
    const loaded = await this.fetch(keys);
    return (key) => loaded.get(key)?.model ?? null;
  }

  invalidate(event: RegistryEvent): void {
    this.generation++;
    switch (event.type) {
      case 'devices.changed':
      case 'devices.removed':
        for (const id of event.deviceIds) this.entries.delete(deviceKey(event.tenant, id));
        break;
      case 'templates.changed': {
        const templates = new Set(event.templateIds);
        for (const [key, { model }] of this.entries) {
          if (model && model.tenant === event.tenant && model.templateIds.some((t) => templates.has(t))) this.entries.delete(key);
        }
        break;
      }
      case 'tenant.changed':
        if (event.tenant === '*') {
          this.entries.clear();
        } else {
          const prefix = deviceKey(event.tenant, '');
          for (const key of this.entries.keys()) if (key.startsWith(prefix)) this.entries.delete(key);
        }
        break;
    }
  }

  /** One query for `keys` (distinct or not); cached unless an event came in meanwhile. */
  private async fetch(keys: string[]): Promise<Map<string, Entry>> {
    const devices = new Map<string, { tenant: string; id: string }>();
    for (const key of keys) {
      if (devices.has(key)) continue;
      const slash = key.indexOf('/');
      devices.set(key, { tenant: key.slice(0, slash), id: key.slice(slash + 1) });
    }
    const startedAt = this.generation;
    const loadedAt = Date.now();
    const models = await this.load([...devices.values()]);
    const entries = new Map<string, Entry>();
    for (const key of devices.keys()) entries.set(key, { model: models.get(key) ?? null, loadedAt });
    if (this.generation === startedAt) for (const [key, entry] of entries) this.put(key, entry);
    return entries;
  }

  private put(key: string, entry: Entry): void {
    // A re-loaded device goes to the back: the map's order stays the order of age.
    this.entries.delete(key);
    if (this.entries.size >= this.capacity) {
      const oldest = this.entries.keys().next();
      if (!oldest.done) this.entries.delete(oldest.value);
    }
    this.entries.set(key, entry);
  }
}

function isStale(entry: Entry, receivedUs: number): boolean {
  return entry.loadedAt < receivedUs / 1000 - RECHECK_AFTER_MS;
}
