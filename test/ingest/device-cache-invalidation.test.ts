// The shard workers' device cache: misses loaded in one batch, absent devices cached, entries
// dropped by registry events, a load overtaken by an event not cached; and the rules that bound
// what a missed event costs: a maximum age, and no drop on the word of an entry older than the
// message.
import { describe, expect, it } from 'vitest';
import { DeviceCache, RECHECK_AFTER_MS } from '../../src/ingest/device-cache.js';
import { buildDeviceModel, type DeviceModel } from '../../src/ingest/device-model.js';

const HOUR = 3_600_000;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
/** Receive times (µs) of messages that came in now. */
const now = (n: number) => new Float64Array(n).fill(Date.now() * 1000);

describe('the shard device cache', () => {
  const model = (tenant: string, id: string, templateIds: number[]) => ({ ...buildDeviceModel(tenant, id, []), templateIds });

  /** A cache over `registry`, recording the device ids of every load. */
  const cacheOver = (registry: Map<string, DeviceModel>, maxAgeMs = HOUR) => {
    const loads: string[][] = [];
    const cache = new DeviceCache(
      (devices) => {
        loads.push(devices.map((d) => d.id));
        return Promise.resolve(
          new Map(
            devices
              .filter((d) => registry.has(`${d.tenant}/${d.id}`))
              .map((d) => [`${d.tenant}/${d.id}`, registry.get(`${d.tenant}/${d.id}`)!]),
          ),
        );
      },
      100,
      maxAgeMs,
    );
    return { cache, loads };
  };

  it('loads misses in one batch, caches absent devices, and drops entries on registry events', async () => {
    const registry = new Map<string, DeviceModel>([['t/a', model('t', 'a', [1])]]);
    const { cache, loads } = cacheOver(registry);
    let got = await cache.resolve(['t/a', 't/b', 't/a'], now(3));
    expect([got.model(0)?.id, got.model(1), got.model(2)?.id]).toEqual(['a', null, 'a']);
    expect(loads).toEqual([['a', 'b']]);
    got = await cache.resolve(['t/a', 't/b'], now(2));
    expect(loads).toHaveLength(1); // both cached, b as absent
    registry.set('t/b', model('t', 'b', [2]));
    cache.invalidate({ type: 'devices.changed', tenant: 't', deviceIds: ['b'] });
    got = await cache.resolve(['t/b'], now(1));
    expect(got.model(0)?.id).toBe('b');
    cache.invalidate({ type: 'templates.changed', tenant: 't', templateIds: [1] });
    await cache.resolve(['t/a', 't/b'], now(2));
    expect(loads.at(-1)).toEqual(['a']);
    cache.invalidate({ type: 'tenant.changed', tenant: '*' });
    await cache.resolve(['t/b'], now(1));
    expect(loads.at(-1)).toEqual(['b']);
  });

  it('a load that was running when an event arrived is used once but not cached', async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    let calls = 0;
    const cache = new DeviceCache(
      async () => {
        calls++;
        if (calls === 1) await gate;
        return new Map();
      },
      100,
      HOUR,
    );
    const pending = cache.resolve(['t/x'], now(1));
    cache.invalidate({ type: 'devices.changed', tenant: 't', deviceIds: ['x'] });
    release();
    expect((await pending).model(0)).toBeNull();
    await cache.resolve(['t/x'], now(1));
    expect(calls).toBe(2);
  });

  it('loads an entry again once it is older than the maximum age, with no event at all', async () => {
    const registry = new Map<string, DeviceModel>([['t/a', model('t', 'a', [1])]]);
    const { cache, loads } = cacheOver(registry, 100);
    await cache.resolve(['t/a'], now(1));
    await cache.resolve(['t/a'], now(1));
    expect(loads).toHaveLength(1);
    await sleep(150);
    await cache.resolve(['t/a'], now(1));
    expect(loads).toHaveLength(2);
  });

  it('an entry older than its message by more than RECHECK_AFTER_MS is stale; an absent device is then looked up again', async () => {
    const registry = new Map<string, DeviceModel>([['t/a', model('t', 'a', [1])]]);
    const { cache, loads } = cacheOver(registry);
    const first = await cache.resolve(['t/a', 't/b'], now(2));
    expect([first.stale(0), first.stale(1)]).toEqual([false, false]);
    // Messages that came in well after the entries were loaded (their receive times in the future).
    const later = new Float64Array(2).fill((Date.now() + RECHECK_AFTER_MS + 500) * 1000);
    registry.set('t/b', model('t', 'b', [1])); // created meanwhile, its event lost
    const got = await cache.resolve(['t/a', 't/b'], later);
    expect(got.model(1)?.id).toBe('b'); // the absent entry was not trusted
    expect(loads.at(-1)).toEqual(['b']);
    expect(got.stale(0)).toBe(true); // a's model: the actor asks reload() before dropping a value on its word
    const fresh = await cache.reload(['t/a']);
    expect(fresh('t/a')?.id).toBe('a');
    expect(loads.at(-1)).toEqual(['a']);
  });
});
