// A device's first stored message reaching the status book long after it came in (committed
// after a database outage, say) is judged by its template's `offline_after`, never by the default
// timeout: a device whose template's timeout (2 s) ran out before the commit was offline all
// along and gets no status change. Before (suspected by an audit, confirmed here), the book took
// the default (600 s) for a device it had not seen yet, told `online`, and at its next tick,
// with the template's timeout read, `offline`: an `online` that was never true.
import type pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { migrate } from '../../src/db/migrate.js';
import { createPool } from '../../src/db/pool.js';
import { createLogger } from '../../src/log.js';
import type { RegistryEvents } from '../../src/registry/events.js';
import { DeviceStatusBook, type StatusChange } from '../../src/registry/devices/status.js';
import { createDevice, createTemplate, eventually } from '../helpers/registry-fixtures.js';
import { freshDatabase } from '../helpers/service.js';

const silent = createLogger('silent');
const noEvents: Pick<RegistryEvents, 'on'> = { on: () => () => undefined };
const FLUSH_MS = 50;

describe('device status: a first message committed late', () => {
  const pools: pg.Pool[] = [];
  const books: DeviceStatusBook[] = [];
  afterAll(async () => {
    for (const b of books) await b.stop();
    for (const p of pools) await p.end().catch(() => undefined);
  });

  async function book(): Promise<{ pool: pg.Pool; book: DeviceStatusBook; changes: StatusChange[] }> {
    const pool = createPool(await freshDatabase(), 2, silent);
    pools.push(pool);
    await migrate(pool, silent);
    const b = new DeviceStatusBook(pool, noEvents, { offlineAfterSeconds: 600, flushMs: FLUSH_MS, log: silent });
    books.push(b);
    await b.start();
    const changes: StatusChange[] = [];
    b.onChange((c) => changes.push(c));
    return { pool, book: b, changes };
  }

  async function quickDevice(pool: pg.Pool): Promise<string> {
    const t = await createTemplate(pool, 'late', 'quick', [{ label: 'n', type: 'dynamic', value_type: 'integer' }]);
    await pool.query('UPDATE templates SET offline_after = 2 WHERE tenant = $1 AND id = $2', ['late', t]);
    return createDevice(pool, 'late', [t]);
  }

  it('received 5 s before it is seen, with a 2 s timeout: no status change, offline in its view', async () => {
    const { pool, book: b, changes } = await book();
    const id = await quickDevice(pool);
    b.seen('late', id, (Date.now() - 5000) * 1000);
    // Several ticks: the template's timeout is read and the sweep has run.
    await new Promise((r) => setTimeout(r, 10 * FLUSH_MS));
    await eventually(async () => (await pool.query('SELECT 1 FROM device_status WHERE device_id = $1', [id])).rowCount === 1, 'written');
    expect(changes).toEqual([]);
    expect(b.fields('late', id).status).toBe('offline');
  });

  it('received just now: online at once, told once', async () => {
    const { pool, book: b, changes } = await book();
    const id = await quickDevice(pool);
    b.seen('late', id, Date.now() * 1000);
    expect(changes.map((c) => [c.deviceId, c.status])).toEqual([[id, 'online']]);
    expect(b.fields('late', id).status).toBe('online');
    // ...and offline once its template's 2 s ran out.
    await eventually(() => changes.length === 2 || undefined, 'offline after 2 s', 10_000);
    expect(changes.map((c) => c.status)).toEqual(['online', 'offline']);
  });
});
