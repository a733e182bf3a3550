// Fault 2 of issue 19: the embedded broker read a QoS 0 sender's next message at once and the
// router held every one, so overload (the database slow or away) grew memory without bound.
// The queue is fixed (INGEST_MAX_PENDING unacknowledged messages): past it QoS 0 messages are
// dropped and counted (`overload`), and a QoS 1 message waits: no PUBACK before its commit.
import crypto from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestService, type TestService } from '../helpers/service.js';
import { createDevice, createTemplate, deviceClient, eventually, historyCount } from '../helpers/registry-fixtures.js';
import { checkSequence, gaugeSum, metricOf, publishSequence, takeDatabaseAway } from '../helpers/faults.js';

const MAX_PENDING = 100;
const QOS0 = 1000;

describe('the embedded broker under overload', () => {
  let svc: TestService;
  const tenant = `q0${crypto.randomBytes(3).toString('hex')}`;
  let steady: string;
  let chatty: string;

  beforeAll(async () => {
    svc = await startTestService({ MQTT_URL: undefined, INGEST_MAX_PENDING: String(MAX_PENDING) });
    const t = await createTemplate(svc.service.pool, tenant, 't', [{ label: 'seq', type: 'dynamic', value_type: 'integer' }]);
    steady = await createDevice(svc.service.pool, tenant, [t]);
    chatty = await createDevice(svc.service.pool, tenant, [t]);
  });
  afterAll(() => svc?.stop());

  it('holds at most INGEST_MAX_PENDING messages: QoS 0 past it dropped as overload, QoS 1 waits for its commit', async () => {
    const url = `mqtt://127.0.0.1:${svc.service.mqttPort}`;
    const qos1 = await deviceClient(url, { username: `${tenant}:${steady}` });
    const qos0 = await deviceClient(url, { username: `${tenant}:${chatty}` });
    const db = new pg.Pool({ connectionString: svc.env.DATABASE_URL, max: 2 });
    db.on('error', () => undefined); // its idle connections are ended by the outage too
    try {
      // Both devices cached before the outage.
      expect(await publishSequence(qos1, `${tenant}:${steady}/attrs`, 0, 1)).toEqual([0]);
      await qos0.publishAsync(`${tenant}:${chatty}/attrs`, JSON.stringify({ seq: 100_000 }), { qos: 0 });
      await eventually(async () => (await historyCount(db, tenant)) === 2 || undefined, 'the first values');
      const received = await metricOf(svc.base, 'ingest_messages_received_total');

      const restore = await takeDatabaseAway(svc.env.DATABASE_URL!);
      let acked = false;
      let held: Promise<number[]>;
      let overload: number;
      try {
        held = publishSequence(qos1, `${tenant}:${steady}/attrs`, 1, 1).then((n) => ((acked = true), n));
        await eventually(async () => (await gaugeSum(svc.base, 'ingest_queue_depth')) >= 1 || undefined, 'the QoS 1 message held');
        for (let i = 1; i <= QOS0; i++) qos0.publish(`${tenant}:${chatty}/attrs`, JSON.stringify({ seq: 100_000 + i }), { qos: 0 });
        await eventually(
          async () => (await metricOf(svc.base, 'ingest_messages_received_total')) >= received + 1 + QOS0 || undefined,
          'every QoS 0 message at the service',
        );
        overload = await metricOf(svc.base, 'ingest_dropped_total{reason="overload"}');
        // What the service holds is bounded; the rest of the QoS 0 flood was dropped and counted.
        expect(await gaugeSum(svc.base, 'ingest_queue_depth')).toBe(MAX_PENDING);
        expect(overload).toBe(1 + QOS0 - MAX_PENDING);
        expect(acked).toBe(false);
      } finally {
        await restore();
      }
      expect(await held).toEqual([1]);
      const expected = 2 + MAX_PENDING;
      await eventually(async () => (await historyCount(db, tenant)) >= expected || undefined, 'the held messages stored', 30_000);
      const check = await checkSequence(db, tenant, [0, 1]);
      expect(check).toEqual({ lost: [], duplicates: 0, stored: expected });
    } finally {
      await db.end();
      await Promise.all([qos1.endAsync(), qos0.endAsync()]);
    }
  });
});
