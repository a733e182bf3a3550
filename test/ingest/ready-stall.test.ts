// /health/ready while the database is away and the receive window is full (embedded broker):
// QoS 1 messages wait, QoS 0 ones past INGEST_MAX_PENDING are dropped for overload (and
// acknowledged, as nothing else can be done with them). Those drops are no progress: ingest
// is reported stalled once nothing has committed for INGEST_STALL_SECONDS.
import crypto from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { http, type TestService } from '../helpers/service.js';
import { deviceClient, eventually, metric } from '../helpers/registry-fixtures.js';
import { gaugeSum, quicklyStalledService, takeDatabaseAway } from '../helpers/faults.js';

describe('readiness while QoS 0 overload drops go on and nothing commits', () => {
  let svc: TestService;
  const tenant = `rs${crypto.randomBytes(3).toString('hex')}`;
  let device: string;

  beforeAll(async () => {
    ({ svc, device } = await quicklyStalledService(tenant));
  });
  afterAll(() => svc?.stop());

  it('says stalled, not ok', async () => {
    const url = `mqtt://127.0.0.1:${svc.service.mqttPort}`;
    const qos1 = await deviceClient(url, { username: `${tenant}:${device}` });
    const qos0 = await deviceClient(url, { username: `${tenant}:${device}` });
    const topic = `${tenant}:${device}/attrs`;
    const restore = await takeDatabaseAway(svc.env.DATABASE_URL!);
    let flooding = true;
    try {
      for (let i = 0; i < 120; i++) void qos1.publishAsync(topic, JSON.stringify({ n: i }), { qos: 1 }).catch(() => undefined);
      await eventually(async () => ((await gaugeSum(svc.base, 'ingest_queue_depth')) >= 100 ? true : undefined), 'the window full');
      const flood = (async () => {
        for (let i = 0; flooding; i++) {
          qos0.publish(topic, JSON.stringify({ n: 1000 + i }), { qos: 0 });
          await new Promise((r) => setTimeout(r, 5));
        }
      })();
      const report = await eventually(
        async () => {
          const r = await http<{ checks: Record<string, string> }>('GET', `${svc.base}/health/ready`);
          return r.body.checks.ingest?.startsWith('stalled') ? r : undefined;
        },
        'ingest reported stalled',
        15_000,
      );
      expect(report.status).toBe(503);
      // The QoS 0 messages were being dropped (and acknowledged) all along.
      expect(metric((await http<string>('GET', `${svc.base}/metrics`)).text, 'ingest_dropped_total{reason="overload"}')).toBeGreaterThan(0);
      flooding = false;
      await flood;
    } finally {
      flooding = false;
      await restore();
      await qos1.endAsync();
      await qos0.endAsync();
    }
  }, 60_000);
});
