// A COPY cut in flight (its backend terminated, as a database restart or an administrator does):
// the connection's error must not end the shard worker, the batch is written again, and ingest
// goes on by itself. Before the fix the unhandled 'error' event ended the worker, and the
// replacement never got the dead worker's shards: ingest stalled for good.
import crypto from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestService, type TestService } from '../helpers/service.js';
import { createDevice, createTemplate, deviceClient, eventually } from '../helpers/registry-fixtures.js';
import { checkSequence, publishSequence } from '../helpers/faults.js';

const DEVICES = 10;
const PER_DEVICE = 3000;
const CUTS = 6;
const MAX_ROUNDS = 5;

describe('a COPY whose backend is terminated mid-statement', () => {
  let svc: TestService;
  const tenant = `cc${crypto.randomBytes(3).toString('hex')}`;
  const devices: string[] = [];
  let db: pg.Pool;

  beforeAll(async () => {
    svc = await startTestService({ INGEST_WORKERS: '2', INGEST_BATCH_ROWS: '200' });
    const t = await createTemplate(svc.service.pool, tenant, 't', [{ label: 'seq', type: 'dynamic', value_type: 'integer' }]);
    for (let i = 0; i < DEVICES; i++) devices.push(await createDevice(svc.service.pool, tenant, [t]));
    db = new pg.Pool({ connectionString: svc.env.DATABASE_URL, max: 2 });
  });
  afterAll(async () => {
    await db?.end();
    await svc?.stop();
  });

  it('is written again: every acknowledged message stored once, and ingest goes on', async () => {
    const url = svc.service.mqttPort ? `mqtt://127.0.0.1:${svc.service.mqttPort}` : svc.env.MQTT_URL!;
    const dbName = new URL(svc.env.DATABASE_URL!).pathname.slice(1);
    let cuts = 0;
    let publishing = true;
    // Terminates COPY statements of the service while they run, CUTS times.
    const cutter = (async () => {
      while (publishing && cuts < CUTS) {
        const { rows } = await db.query<{ cut: boolean }>(
          `SELECT pg_terminate_backend(pid) AS cut FROM pg_stat_activity
            WHERE datname = $1 AND state = 'active' AND query LIKE 'COPY history%' AND pid <> pg_backend_pid()`,
          [dbName],
        );
        cuts += rows.filter((r) => r.cut).length;
        await new Promise((r) => setTimeout(r, 20));
      }
    })();
    // Rounds of messages until a COPY was caught in flight (a fast machine may commit a round
    // between two looks at pg_stat_activity).
    const acked: number[] = [];
    let rounds = 0;
    while (rounds < MAX_ROUNDS && (rounds === 0 || cuts === 0)) {
      const first = rounds * DEVICES * PER_DEVICE;
      const round = await Promise.all(
        devices.map(async (id, d) => {
          const c = await deviceClient(url, { username: `${tenant}:${id}` });
          const got = await publishSequence(c, `${tenant}:${id}/attrs`, first + d * PER_DEVICE, PER_DEVICE);
          await c.endAsync();
          return got;
        }),
      );
      acked.push(...round.flat());
      rounds++;
    }
    publishing = false;
    await cutter;
    expect(cuts, 'COPY statements terminated in flight').toBeGreaterThan(0);
    expect(acked).toHaveLength(rounds * DEVICES * PER_DEVICE);
    const check = await eventually(
      async () => {
        const c = await checkSequence(db, tenant, acked);
        return c.lost.length === 0 ? c : undefined;
      },
      'every acknowledged message stored',
      60_000,
    );
    expect(check.duplicates).toBe(0);
    // Ingest still runs: one more message of each device is stored.
    const after = await Promise.all(
      devices.map(async (id, d) => {
        const c = await deviceClient(url, { username: `${tenant}:${id}` });
        const got = await publishSequence(c, `${tenant}:${id}/attrs`, rounds * DEVICES * PER_DEVICE + d, 1);
        await c.endAsync();
        return got;
      }),
    );
    await eventually(
      async () => ((await checkSequence(db, tenant, after.flat())).lost.length === 0 ? true : undefined),
      'ingest after the cuts',
      30_000,
    );
  }, 180_000);
});
