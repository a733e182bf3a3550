// The shard workers' device cache: misses loaded in one batch, absent devices cached, entries
// dropped by registry events, and a load overtaken by an event not cached.
import { describe, expect, it } from 'vitest';
import { DeviceCache } from '../../src/ingest/device-cache.js';
import { buildDeviceModel, type DeviceModel } from '../../src/ingest/device-model.js';

describe('the shard device cache', () => {
  const model = (tenant: string, id: string, templateIds: number[]) => ({ ...buildDeviceModel(tenant, id, []), templateIds });

  it('loads misses in one batch, caches absent devices, and drops entries on registry events', async () => {
    const registry = new Map<string, DeviceModel>([['t/a', model('t', 'a', [1])]]);
    const loads: string[][] = [];
    const cache = new DeviceCache((devices) => {
      loads.push(devices.map((d) => d.id));
      return Promise.resolve(
        new Map(
          devices
            .filter((d) => registry.has(`${d.tenant}/${d.id}`))
            .map((d) => [`${d.tenant}/${d.id}`, registry.get(`${d.tenant}/${d.id}`)!]),
        ),
      );
    }, 100);
    let get = await cache.resolve(['t/a', 't/b', 't/a']);
    expect([get(0)?.id, get(1), get(2)?.id]).toEqual(['a', null, 'a']);
    expect(loads).toEqual([['a', 'b']]);
    get = await cache.resolve(['t/a', 't/b']);
    expect(loads).toHaveLength(1); // both cached, b as absent
    registry.set('t/b', model('t', 'b', [2]));
    cache.invalidate({ type: 'devices.changed', tenant: 't', deviceIds: ['b'] });
    get = await cache.resolve(['t/b']);
    expect(get(0)?.id).toBe('b');
    cache.invalidate({ type: 'templates.changed', tenant: 't', templateIds: [1] });
    await cache.resolve(['t/a', 't/b']);
    expect(loads.at(-1)).toEqual(['a']);
    cache.invalidate({ type: 'tenant.changed', tenant: '*' });
    await cache.resolve(['t/b']);
    expect(loads.at(-1)).toEqual(['b']);
  });

  it('a load that was running when an event arrived is used once but not cached', async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    let calls = 0;
    const cache = new DeviceCache(async () => {
      calls++;
      if (calls === 1) await gate;
      return new Map();
    }, 100);
    const pending = cache.resolve(['t/x']);
    cache.invalidate({ type: 'devices.changed', tenant: 't', deviceIds: ['x'] });
    release();
    expect((await pending)(0)).toBeNull();
    await cache.resolve(['t/x']);
    expect(calls).toBe(2);
  });
});
