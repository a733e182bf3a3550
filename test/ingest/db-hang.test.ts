// Point 9 of issue 19: every database connection has a statement timeout, so a write that hangs
// (here behind a lock the test holds on history) fails in bounded time and is retried, and
// ingest goes on by itself once the lock is gone: nothing lost, nothing stored twice.
import crypto from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestService, type TestService } from '../helpers/service.js';
import { createDevice, createTemplate, deviceClient, eventually, historyCount } from '../helpers/registry-fixtures.js';
import { checkSequence, publishSequence } from '../helpers/faults.js';

const TIMEOUT_MS = 1000;
const HOLD_MS = 4000;
const MESSAGES = 50;

describe('a write that hangs behind a lock', () => {
  let svc: TestService;
  const tenant = `dh${crypto.randomBytes(3).toString('hex')}`;
  let device: string;

  beforeAll(async () => {
    svc = await startTestService({ DB_STATEMENT_TIMEOUT_MS: String(TIMEOUT_MS), INGEST_WORKERS: '1' });
    const t = await createTemplate(svc.service.pool, tenant, 't', [{ label: 'seq', type: 'dynamic', value_type: 'integer' }]);
    device = await createDevice(svc.service.pool, tenant, [t]);
  });
  afterAll(() => svc?.stop());

  it('fails within DB_STATEMENT_TIMEOUT_MS, is retried, and commits once the lock is released', async () => {
    const client = await deviceClient(svc.env.MQTT_URL!);
    const topic = `${tenant}:${device}/attrs`;
    const db = new pg.Pool({ connectionString: svc.env.DATABASE_URL, max: 3 });
    const locker = await db.connect();
    try {
      expect(await publishSequence(client, topic, 0, 1)).toEqual([0]);
      await eventually(async () => (await historyCount(db, tenant, device)) === 1 || undefined, 'the first value');

      await locker.query('BEGIN');
      await locker.query('LOCK TABLE history IN ACCESS EXCLUSIVE MODE');
      const lockerPid = (await locker.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
      const acked = publishSequence(client, topic, 1, MESSAGES);
      // While the lock is held: the service's statements wait for it, none for longer than the
      // timeout (and a margin for sampling).
      let waited = 0;
      let longest = 0;
      const until = Date.now() + HOLD_MS;
      while (Date.now() < until) {
        const { rows } = await db.query<{ n: number; secs: number | null }>(
          `SELECT count(*)::int AS n, max(extract(epoch FROM now() - query_start))::float8 AS secs FROM pg_stat_activity
           WHERE datname = current_database() AND wait_event_type = 'Lock' AND pid <> $1`,
          [lockerPid],
        );
        waited = Math.max(waited, rows[0]!.n);
        longest = Math.max(longest, rows[0]!.secs ?? 0);
        await new Promise((r) => setTimeout(r, 100));
      }
      await locker.query('COMMIT');
      expect(waited).toBeGreaterThan(0); // a write did wait for the lock
      expect(longest).toBeLessThan(TIMEOUT_MS / 1000 + 1);

      const numbers = await acked;
      expect(numbers).toHaveLength(MESSAGES);
      await eventually(async () => (await historyCount(db, tenant, device)) >= MESSAGES + 1 || undefined, 'every message stored', 30_000);
      expect(await checkSequence(db, tenant, [0, ...numbers])).toEqual({ lost: [], duplicates: 0, stored: MESSAGES + 1 });
    } finally {
      await locker.query('ROLLBACK').catch(() => undefined);
      locker.release();
      await db.end();
      await client.endAsync();
    }
  });
});
