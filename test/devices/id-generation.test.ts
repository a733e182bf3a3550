// Device ids: 6 lowercase hex characters, redrawn on collision up to 10 times, then 500.
// The generator is replaced here to force collisions; the service is otherwise the real one.
import { describe, expect, it } from 'vitest';
import { ApiError } from '../../src/errors.js';
import { DeviceService, randomDeviceId } from '../../src/registry/devices/service.js';
import { countOf } from '../helpers/db.js';
import { createDevices } from '../helpers/registry-api.js';
import { useService } from '../helpers/service.js';

const svc = useService();

const serviceWith = (randomId: () => string) =>
  new DeviceService(svc.service.pool, svc.service.events, { cacheSize: 0, cacheMaxAgeMs: 60_000, randomId });
const count = () => countOf(svc.service.pool, 'SELECT count(*)::int AS n FROM devices');

describe('device id generation', () => {
  it('draws 6 lowercase hex characters', () => {
    for (let i = 0; i < 100; i++) expect(randomDeviceId()).toMatch(/^[0-9a-f]{6}$/);
  });

  it('a taken id is drawn again', async () => {
    await createDevices(svc.base, svc.token, { id: 'aaaaaa', label: 'taken', templates: [] });
    const draws = ['aaaaaa', 'aaaaaa', 'bbbbbb'];
    const r = await serviceWith(() => draws.shift() ?? 'cccccc').create(
      'admin',
      { count: 1, verbose: false },
      { label: 'new', templates: [] },
    );
    expect(r.devices).toEqual([{ id: 'bbbbbb', label: 'new_0' }]);
  });

  it('ids repeated within one request are drawn again', async () => {
    const draws = ['dddddd', 'dddddd', 'dddddd', 'eeeeee'];
    const r = await serviceWith(() => draws.shift() ?? 'ffffff').create(
      'admin',
      { count: 3, verbose: false },
      { label: 'rep', templates: [] },
    );
    expect(r.devices.map((d) => d.id).sort()).toEqual(['dddddd', 'eeeeee', 'ffffff']);
    expect(r.devices.map((d) => d.label).sort()).toEqual(['rep_0', 'rep_1', 'rep_2']);
  });

  it('after 10 collisions: 500 Failed to generate unique device_id, nothing created', async () => {
    const before = await count();
    const err = await serviceWith(() => 'aaaaaa')
      .create('admin', { count: 2, verbose: false }, { label: 'fail', templates: [] })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ApiError);
    expect((err as ApiError).httpStatus).toBe(500);
    expect((err as ApiError).body).toEqual({ message: 'Failed to generate unique device_id', status: 500 });
    expect(await count()).toBe(before);
  });
});
