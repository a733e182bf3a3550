// Database outage: while PostgreSQL refuses connections, ingest stops acknowledging (nothing is
// dropped for that reason); when it is back, ingest resumes by itself and every message is stored.
import crypto from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { gaugeSum, takeDatabaseAway } from '../helpers/faults.js';
import { http, startTestService, type TestService } from '../helpers/service.js';
import { createDevice, createTemplate, deviceClient, eventually, historyCount, metric } from '../helpers/registry-fixtures.js';

/** A separate pool for the test's own reads (the service's pool is cut too). */
function reader(svc: TestService): pg.Pool {
  return new pg.Pool({ connectionString: svc.env.DATABASE_URL, max: 2 });
}

describe.each([
  ['the external broker (MQTT_URL)', {}],
  ['the embedded broker', { MQTT_URL: undefined }],
])('database outage with %s', (_name, env) => {
  let svc: TestService;
  const tenant = `out${crypto.randomBytes(3).toString('hex')}`;
  let device: string;

  beforeAll(async () => {
    svc = await startTestService(env);
    const t = await createTemplate(svc.service.pool, tenant, 't', [{ label: 'n', type: 'dynamic', value_type: 'integer' }]);
    device = await createDevice(svc.service.pool, tenant, [t]);
  });
  afterAll(() => svc?.stop());

  it('stops acknowledging, drops nothing, and resumes by itself', async () => {
    const url = svc.service.mqttPort ? `mqtt://127.0.0.1:${svc.service.mqttPort}` : svc.env.MQTT_URL!;
    const client = await deviceClient(url, { username: `${tenant}:${device}` });
    const topic = `${tenant}:${device}/attrs`;
    await client.publishAsync(topic, JSON.stringify({ n: 0 }), { qos: 1 });
    await eventually(async () => (await historyCount(svc.service.pool, tenant, device)) === 1 || undefined, 'the first value');

    const restore = await takeDatabaseAway(svc.env.DATABASE_URL!);
    const during = 50;
    let acked = 0;
    const publishes = Array.from({ length: during }, (_, i) =>
      client.publishAsync(topic, JSON.stringify({ n: i + 1 }), { qos: 1 }).then(() => acked++),
    );
    const held = () => gaugeSum(svc.base, 'ingest_queue_depth');
    try {
      // The messages reached the service, which holds them unacknowledged for as long as the
      // database is away.
      await eventually(async () => (await held()) >= during || undefined, 'the messages to be held by the router');
      await new Promise((r) => setTimeout(r, 700));
      expect(await held()).toBeGreaterThanOrEqual(during);
      if (svc.service.mqttPort) expect(acked).toBe(0); // embedded broker: the device sees no PUBACK before the commit
    } finally {
      await restore();
    }
    await Promise.all(publishes);
    const db = reader(svc);
    try {
      await eventually(
        async () => (await historyCount(db, tenant, device)) === during + 1 || undefined,
        'every value after the outage',
        30_000,
      );
      const values = (
        await db.query<{ n: number }>('SELECT value::int AS n FROM history WHERE tenant = $1 AND device_id = $2 ORDER BY n', [
          tenant,
          device,
        ])
      ).rows.map((r) => r.n);
      expect(values).toEqual([...Array(during + 1).keys()]);
      // And ingest goes on.
      await client.publishAsync(topic, JSON.stringify({ n: 1000 }), { qos: 1 });
      await eventually(async () => (await historyCount(db, tenant, device)) === during + 2 || undefined, 'a value after recovery');
      const text = (await http('GET', `${svc.base}/metrics`)).text;
      expect(metric(text, 'ingest_dropped_total{reason="db_rejected"}')).toBe(0);
    } finally {
      await db.end();
      await client.endAsync();
    }
  });
});
