// The shipped alert rules (deploy/prometheus/alerts.yml) against a running service: each rule's
// expression, evaluated over two scrapes of /metrics taken seconds apart (test/helpers/promql.ts,
// since Prometheus is not run here), returns series in the condition it is named for and none
// while all is well. observability.test.ts checks that the files parse and use existing metrics.
import crypto from 'node:crypto';
import { parse } from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { takeDatabaseAway } from '../helpers/faults.js';
import { evaluate, parseScrape, type Samples } from '../helpers/promql.js';
import { createDevice, createTemplate, deviceClient, eventually } from '../helpers/registry-fixtures.js';
import { http, startTestService, type TestService } from '../helpers/service.js';
import { readRepoFile } from './files.js';

const rules = (
  parse(readRepoFile('deploy/prometheus/alerts.yml')) as { groups: Array<{ rules: Array<{ alert: string; expr: string }> }> }
).groups.flatMap((g) => g.rules);
const exprOf = (alert: string) => rules.find((r) => r.alert === alert)!.expr;

describe('IngestStalled', () => {
  let svc: TestService;
  const tenant = `al${crypto.randomBytes(3).toString('hex')}`;
  let device: string;
  const scrape = async (): Promise<Samples> => parseScrape((await http<string>('GET', `${svc.internal}/metrics`)).text);
  /** The rule over two scrapes `seconds` apart. */
  const fires = async (seconds: number) => {
    const before = await scrape();
    await new Promise((r) => setTimeout(r, seconds * 1000));
    return evaluate(exprOf('IngestStalled'), before, await scrape(), seconds).length > 0;
  };

  beforeAll(async () => {
    svc = await startTestService({ MQTT_URL: undefined, INGEST_MAX_PENDING: '100', INGEST_STALL_SECONDS: '2' });
    const t = await createTemplate(svc.service.pool, tenant, 't', [{ label: 'n', type: 'dynamic', value_type: 'integer' }]);
    device = await createDevice(svc.service.pool, tenant, [t]);
  });
  afterAll(() => svc?.stop());

  it('does not fire while messages are committed', async () => {
    const client = await deviceClient(`mqtt://127.0.0.1:${svc.service.mqttPort}`, { username: `${tenant}:${device}` });
    for (let i = 0; i < 20; i++) await client.publishAsync(`${tenant}:${device}/attrs`, JSON.stringify({ n: i }), { qos: 1 });
    await client.endAsync();
    expect(await fires(1)).toBe(false);
  });

  // The database away: QoS 1 messages wait, QoS 0 ones past INGEST_MAX_PENDING are dropped for
  // overload and acknowledged (as nothing else can be done with them). Those acknowledgements
  // are no progress: before, the rule asked for no acknowledgement at all, so a device sending
  // QoS 0 (or anything dropped) kept it silent through the whole stall.
  it('fires while messages wait and nothing commits, QoS 0 overload drops going on', async () => {
    const url = `mqtt://127.0.0.1:${svc.service.mqttPort}`;
    const qos1 = await deviceClient(url, { username: `${tenant}:${device}` });
    const qos0 = await deviceClient(url, { username: `${tenant}:${device}` });
    const topic = `${tenant}:${device}/attrs`;
    const restore = await takeDatabaseAway(svc.env.DATABASE_URL!);
    let flooding = true;
    let flood: Promise<void> | undefined;
    try {
      for (let i = 0; i < 120; i++) void qos1.publishAsync(topic, JSON.stringify({ n: i }), { qos: 1 }).catch(() => undefined);
      flood = (async () => {
        for (let i = 0; flooding; i++) {
          qos0.publish(topic, JSON.stringify({ n: 1000 + i }), { qos: 0 });
          await new Promise((r) => setTimeout(r, 5));
        }
      })();
      await eventually(
        async () =>
          (await http<{ checks: Record<string, string> }>('GET', `${svc.base}/health/ready`)).body.checks.ingest?.startsWith('stalled'),
        'ingest reported stalled',
        15_000,
      );
      const before = await scrape();
      await new Promise((r) => setTimeout(r, 2000));
      const now = await scrape();
      // The drops went on (and were acknowledged) between the two scrapes.
      const overload = (s: Samples) => s.get('ingest_dropped_total')!.find((x) => x.labels.reason === 'overload')!.value;
      expect(overload(now)).toBeGreaterThan(overload(before));
      expect(evaluate(exprOf('IngestStalled'), before, now, 2)).not.toEqual([]);
    } finally {
      flooding = false;
      await flood;
      await restore();
      await qos1.endAsync();
      await qos0.endAsync();
    }
  }, 60_000);
});
