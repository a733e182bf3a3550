// Which devices exist, for the embedded broker's authorisation: one query per unknown device,
// then cached (present or absent) until a registry event says otherwise, or for `maxAgeMs` at
// most (REGISTRY_CACHE_MAX_AGE_SECONDS: events can be missed). A lookup that ran while an event
// arrived is not cached (it may have read the registry before the change).
import { setImmediate } from 'node:timers/promises';
import type pg from 'pg';
import type { RegistryEvent } from '../registry/events.js';
import { deviceKey } from '../topics.js';

export class DeviceDirectory {
  /** Whether the device exists, and when that was read (performance.now()). */
  private readonly known = new Map<string, { exists: boolean; at: number }>();
  private generation = 0;

  constructor(
    private readonly pool: pg.Pool,
    private readonly maxAgeMs: number,
    private readonly capacity = 1_000_000,
  ) {}

  async exists(tenant: string, id: string): Promise<boolean> {
    // Let a registry event that is already queued for this thread land first (see shard-actor.ts).
    await setImmediate();
    const key = deviceKey(tenant, id);
    const hit = this.known.get(key);
    if (hit !== undefined && performance.now() - hit.at <= this.maxAgeMs) return hit.exists;
    const gen = this.generation;
    const at = performance.now();
    const { rowCount } = await this.pool.query({
      name: 'broker-device-exists',
      text: 'SELECT 1 FROM devices WHERE tenant = $1 AND id = $2',
      values: [tenant, id],
    });
    const exists = (rowCount ?? 0) > 0;
    if (gen === this.generation) {
      if (this.known.size >= this.capacity) this.known.clear();
      this.known.set(key, { exists, at });
    }
    return exists;
  }

  invalidate(event: RegistryEvent): void {
    this.generation++;
    if (event.type === 'devices.changed' || event.type === 'devices.removed') {
      for (const id of event.deviceIds) this.known.delete(deviceKey(event.tenant, id));
    } else if (event.type === 'tenant.changed') {
      if (event.tenant === '*') this.known.clear();
      else for (const key of this.known.keys()) if (key.startsWith(deviceKey(event.tenant, ''))) this.known.delete(key);
    }
  }
}
