// A database outage while device status waits to be written is logged once (and its end once),
// not at every DEVICE_STATUS_FLUSH_MS tick: an hour without the database used to be 3,600 warn
// lines at the default period (72,000 at 50 ms).
import type pg from 'pg';
import { afterAll, describe, expect, it, vi } from 'vitest';
import { migrate } from '../../src/db/migrate.js';
import { createPool } from '../../src/db/pool.js';
import { createLogger } from '../../src/log.js';
import type { RegistryEvents } from '../../src/registry/events.js';
import { DeviceStatusBook } from '../../src/registry/devices/status.js';
import { eventually } from '../helpers/registry-fixtures.js';
import { freshDatabase } from '../helpers/service.js';

const silent = createLogger('silent');
const noEvents: Pick<RegistryEvents, 'on'> = { on: () => () => undefined };

describe('device status: writes failing while the database is away', () => {
  const pools: pg.Pool[] = [];
  afterAll(async () => {
    for (const p of pools) await p.end().catch(() => undefined);
  });

  it('one warning for the outage and one line when writing works again, however many ticks fail', async () => {
    const pool = createPool(await freshDatabase(), 2, silent);
    pools.push(pool);
    await migrate(pool, silent);
    const lines: { level: string; msg: string }[] = [];
    const log = createLogger('info', {}, { write: (line) => lines.push(JSON.parse(line) as { level: string; msg: string }) });
    const book = new DeviceStatusBook(pool, noEvents, { offlineAfterSeconds: 600, flushMs: 50, log });
    await book.start();
    try {
      const query = vi.spyOn(pool, 'query').mockRejectedValue(new Error('connect ECONNREFUSED 127.0.0.1:5432'));
      book.seen('t1', 'abc123', Date.now() * 1000);
      // Twenty ticks or more without the database.
      await eventually(() => query.mock.calls.length >= 20, 'twenty failed ticks', 10_000);
      const warnings = lines.filter((l) => l.level === 'warn');
      expect(warnings.map((l) => l.msg)).toEqual(['could not write device status; trying again until the database answers']);
      query.mockRestore();
      await eventually(() => lines.some((l) => l.msg === 'device status written again'), 'the line saying writing works again', 10_000);
      expect(lines.filter((l) => l.level === 'warn')).toHaveLength(1);
    } finally {
      await book.stop();
    }
  });
});
