// A shard worker's cache of its devices: a model per known device, `null` for a device that
// does not exist (so a flood from an unknown device costs one query, not one per message).
// Misses are loaded in one query per batch. Registry events drop entries; a load that was
// running while an event arrived is used for its batch but not cached, because it may have
// read the registry before the change committed.
import type { RegistryEvent } from '../registry/events.js';
import { deviceKey } from '../topics.js';
import type { DeviceModel } from './device-model.js';

export type DeviceLoader = (devices: Array<{ tenant: string; id: string }>) => Promise<Map<string, DeviceModel>>;

/** Lookups since the previous report, and the devices cached now. */
export interface DeviceCacheStats {
  hits: number;
  misses: number;
  size: number;
}

export class DeviceCache {
  private readonly entries = new Map<string, DeviceModel | null>();
  private generation = 0;
  private hits = 0;
  private misses = 0;

  constructor(
    private readonly load: DeviceLoader,
    private readonly capacity: number,
  ) {}

  /** The stats since the previous call. */
  takeStats(): DeviceCacheStats {
    const stats = { hits: this.hits, misses: this.misses, size: this.entries.size };
    this.hits = 0;
    this.misses = 0;
    return stats;
  }

  /** Models for every device key of a batch (`<tenant>/<id>`); misses are loaded in one query. */
  async resolve(keys: string[]): Promise<(i: number) => DeviceModel | null> {
    const n = keys.length;
    const found = new Array<DeviceModel | null | undefined>(n);
    const missing = new Map<string, { tenant: string; id: string }>();
    for (let i = 0; i < n; i++) {
      const key = keys[i]!;
      const hit = this.entries.get(key);
      if (hit !== undefined) {
        this.hits++;
        found[i] = hit;
      } else {
        this.misses++;
        if (!missing.has(key)) {
          const slash = key.indexOf('/');
          missing.set(key, { tenant: key.slice(0, slash), id: key.slice(slash + 1) });
        }
      }
    }
    if (missing.size === 0) return (i) => found[i] ?? null;
    const startedAt = this.generation;
    const loaded = await this.load([...missing.values()]);
    if (this.generation === startedAt) {
      for (const key of missing.keys()) this.put(key, loaded.get(key) ?? null);
    }
    return (i) => {
      const f = found[i];
      if (f !== undefined) return f;
      return loaded.get(keys[i]!) ?? null;
    };
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
        for (const [key, model] of this.entries) {
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

  private put(key: string, value: DeviceModel | null): void {
    if (this.entries.size >= this.capacity) {
      // Oldest first (Map keeps insertion order); a re-loaded device goes to the back.
      const oldest = this.entries.keys().next();
      if (!oldest.done) this.entries.delete(oldest.value);
    }
    this.entries.set(key, value);
  }
}
