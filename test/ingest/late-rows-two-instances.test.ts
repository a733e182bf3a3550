// Two instances on one database writing late rows (device timestamps before the current hour:
// buffered readings) of the same devices at once. Such rows fire history's late-row triggers,
// which upsert one row per series (history_series_span) and per series and hour
// (history_rollup_dirty) in the order of the COPY's rows: two COPYs holding the same series in
// another order deadlocked, and PostgreSQL aborted one of them (retried after a second, logged
// as "could not write history; retrying until the database is back"). Found by an audit: two
// instances on one broker, 20,000 messages of 400 past days, two deadlocks. Each instance here
// has its own embedded broker, so the test decides what each one receives: the same devices,
// in opposite orders, held back by a lock until both COPYs are ready.
import crypto from 'node:crypto';
import type mqtt from 'mqtt';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestService, type TestService } from '../helpers/service.js';
import { createDevices, createTemplate, deviceClient, eventually } from '../helpers/registry-fixtures.js';

const DEVICES = 40;
const DAYS = 25;
const ROUNDS = 3;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('late rows of the same devices written by two instances at once', () => {
  let a: TestService;
  let b: TestService;
  let admin: pg.Pool;
  beforeAll(async () => {
    a = await startTestService({ MQTT_URL: undefined, INGEST_WORKERS: '1' });
    b = await startTestService({ MQTT_URL: undefined, INGEST_WORKERS: '1', DATABASE_URL: a.env.DATABASE_URL });
    admin = new pg.Pool({ connectionString: a.env.DATABASE_URL, max: 3 });
  }, 120_000);
  afterAll(async () => {
    await a?.stop();
    await b?.stop();
    await admin?.end();
  });

  it('commit without a deadlock, every message stored once', async () => {
    const layout = await admin.query<{ timescale: boolean }>('SELECT timescale FROM history_settings');
    const tenant = `lr${crypto.randomBytes(3).toString('hex')}`;
    const t = await createTemplate(admin, tenant, 'late', [{ label: 'n', type: 'dynamic', value_type: 'integer' }]);
    const ids = Array.from({ length: DEVICES }, (_, i) => `d${String(i).padStart(3, '0')}`);
    await createDevices(admin, tenant, t, ids);
    const clients: mqtt.MqttClient[][] = [];
    for (const svc of [a, b]) {
      const url = `mqtt://127.0.0.1:${svc.service.mqttPort}`;
      clients.push(await Promise.all(ids.map((id) => deviceClient(url, { username: `${tenant}:${id}` }))));
    }
    const deadlocks = async () =>
      Number(
        (await admin.query<{ n: string }>('SELECT deadlocks AS n FROM pg_stat_database WHERE datname = current_database()')).rows[0]!.n,
      );
    try {
      // Models cached, one live message each.
      await Promise.all(
        clients.flatMap((cs, k) =>
          cs.map((c, i) => c.publishAsync(`${tenant}:${ids[i]}/attrs`, JSON.stringify({ n: -1 - k }), { qos: 1 })),
        ),
      );
      const before = await deadlocks();
      let seq = 0;
      for (let round = 0; round < ROUNDS; round++) {
        const start = Date.UTC(2001 + round, 0, 1, 12);
        if (!layout.rows[0]!.timescale)
          await admin.query(
            'SELECT history_ensure_partition(to_timestamp($1::float8 / 1000 + g * 86400)) FROM generate_series(0, $2::int - 1) g',
            [start, DAYS],
          );
        const locker = await admin.connect();
        await locker.query('BEGIN; LOCK TABLE history IN ACCESS EXCLUSIVE MODE');
        // A live message each: each instance's COPY of it waits for the lock, and the late
        // messages then fill each one's next COPY whole; both start as the first ones commit.
        const acks: Array<Promise<unknown>> = [
          clients[0]![0]!.publishAsync(`${tenant}:${ids[0]}/attrs`, JSON.stringify({ n: -1 }), { qos: 1 }),
          clients[1]![0]!.publishAsync(`${tenant}:${ids[0]}/attrs`, JSON.stringify({ n: -2 }), { qos: 1 }),
        ];
        await eventually(async () => {
          const { rows } = await admin.query<{ n: string }>(
            "SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE 'COPY%'",
          );
          return Number(rows[0]!.n) >= 2;
        }, 'both instances waiting to COPY');
        // Instance a gets the devices in one order, b in the other; each device's messages of
        // several past days (one hour each), so that each COPY upserts many rows of both tables.
        for (const [k, order] of [
          [0, ids.map((_, i) => i)],
          [1, ids.map((_, i) => DEVICES - 1 - i)],
        ] as const) {
          for (const i of order) {
            for (let day = 0; day < DAYS; day++) {
              const n = seq++;
              acks.push(
                clients[k]![i]!.publishAsync(`${tenant}:${ids[i]}/attrs`, JSON.stringify({ n, timestamp: start + day * 86_400_000 }), {
                  qos: 1,
                }),
              );
            }
            await sleep(1);
          }
        }
        await sleep(1000);
        await locker.query('COMMIT');
        locker.release();
        await Promise.all(acks);
      }
      const { rows } = await admin.query<{ n: string; d: string }>(
        'SELECT count(*) AS n, count(DISTINCT value) AS d FROM history WHERE tenant = $1 AND value::int >= 0',
        [tenant],
      );
      expect({ rows: Number(rows[0]!.n), distinct: Number(rows[0]!.d) }).toEqual({ rows: seq, distinct: seq });
      await sleep(1500); // statistics reach pg_stat_database within a second
      expect(await deadlocks()).toBe(before);
    } finally {
      await Promise.all(clients.flat().map((c) => c.endAsync()));
    }
  }, 180_000);
});
