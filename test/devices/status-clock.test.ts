// `?status=online|offline` judges a device's stored last_seen by the service's clock, the one
// its views (`withStatus`, status messages) judge by, not the database's now(): with a database
// on another host whose clock is some seconds off, the filter listed a device `online` that
// every view of the same instance showed `offline`, or the other way round (found by two audits;
// docs/live.md §1). Here the device was last seen 30 s ago by the database's clock, its timeout is
// 60 s, and the service's clock is given as the database's plus or minus 45 s.
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { migrate } from '../../src/db/migrate.js';
import { createPool } from '../../src/db/pool.js';
import { createLogger } from '../../src/log.js';
import { listDeviceIds } from '../../src/registry/devices/repo.js';
import type { DeviceQuery } from '../../src/registry/devices/types.js';
import { createDevice, createTemplate } from '../helpers/registry-fixtures.js';
import { freshDatabase } from '../helpers/service.js';

const TENANT = 'clock';
const silent = createLogger('silent');

describe('?status= and the service clock', () => {
  let pool: pg.Pool;
  let device: string;
  let dbNowUs: number;
  beforeAll(async () => {
    pool = createPool(await freshDatabase(), 2, silent);
    await migrate(pool, silent);
    const template = await createTemplate(pool, TENANT, 'thermo', [{ label: 'temperature', type: 'dynamic', value_type: 'float' }]);
    device = await createDevice(pool, TENANT, [template]);
    const { rows } = await pool.query<{ now_us: string }>(
      `INSERT INTO device_status (tenant, device_id, last_seen) VALUES ($1, $2, now() - interval '30 seconds')
       RETURNING (extract(epoch FROM now()) * 1000000)::int8::text AS now_us`,
      [TENANT, device],
    );
    dbNowUs = Number(rows[0]!.now_us);
  });
  afterAll(() => pool?.end());

  const listed = async (online: boolean, clockOffsetS: number) => {
    const q: DeviceQuery = {
      filters: { label: undefined, attrs: [], attrTypes: [], sortByLabel: false },
      status: { online, offlineAfterSeconds: 60, nowUs: dbNowUs + clockOffsetS * 1_000_000 },
    };
    return (await listDeviceIds(pool, TENANT, q)).includes(device);
  };

  it('a service clock 45 s ahead: seen 75 s ago, offline (its timeout is 60 s)', async () => {
    expect(await listed(true, 45)).toBe(false);
    expect(await listed(false, 45)).toBe(true);
  });

  it('the same clock: seen 30 s ago, online', async () => {
    expect(await listed(true, 0)).toBe(true);
    expect(await listed(false, 0)).toBe(false);
  });

  it('a service clock 45 s behind the database: still within its timeout, online', async () => {
    expect(await listed(true, -45)).toBe(true);
  });
});
