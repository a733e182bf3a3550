// The shipped alert rules (deploy/prometheus/alerts.yml) against a running service: each rule's
// expression, evaluated over two scrapes of /metrics taken seconds apart (test/helpers/promql.ts,
// since Prometheus is not run here), returns series in the condition it is named for and none
// while all is well. observability.test.ts checks that the files parse and use existing metrics.
import crypto from 'node:crypto';
import { parse } from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dropReasonsCounting } from '../../src/ingest/drop-reasons.js';
import { quicklyStalledService, takeDatabaseAway } from '../helpers/faults.js';
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
    ({ svc, device } = await quicklyStalledService(tenant));
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

describe('IngestDropsRising', () => {
  let svc: TestService;
  const tenant = `ad${crypto.randomBytes(3).toString('hex')}`;
  let device: string;
  const labels = Array.from({ length: 20 }, (_, i) => `v${i}`);
  const scrape = async (): Promise<Samples> => parseScrape((await http<string>('GET', `${svc.internal}/metrics`)).text);
  const acknowledged = (s: Samples) => s.get('ingest_messages_acknowledged_total')![0]!.value;
  const dropped = (s: Samples) => s.get('ingest_dropped_total')!.reduce((n, x) => n + x.value, 0);

  beforeAll(async () => {
    svc = await startTestService({ MQTT_URL: undefined });
    const t = await createTemplate(
      svc.service.pool,
      tenant,
      't',
      labels.map((label) => ({ label, type: 'dynamic', value_type: 'float' })),
    );
    device = await createDevice(svc.service.pool, tenant, [t]);
  });
  afterAll(() => svc?.stop());

  /** The rule over the scrapes before and after these messages (QoS 1, all at once), once their `drops` are counted. */
  async function firesFor(payloads: string[], drops: number): Promise<boolean> {
    const client = await deviceClient(`mqtt://127.0.0.1:${svc.service.mqttPort}`, { username: `${tenant}:${device}` });
    const before = await scrape();
    const started = Date.now();
    await Promise.all(payloads.map((p) => client.publishAsync(`${tenant}:${device}/attrs`, p, { qos: 1 })));
    // The shard workers' counts reach the main thread in the router's reports (every 250 ms).
    const now = await eventually(async () => {
      const s = await scrape();
      return acknowledged(s) - acknowledged(before) === payloads.length && dropped(s) - dropped(before) === drops ? s : undefined;
    }, 'the messages and their drops counted');
    await client.endAsync();
    return evaluate(exprOf('IngestDropsRising'), before, now, (Date.now() - started) / 1000).length > 0;
  }
  const values = (n: number, extra: Record<string, unknown> = {}) =>
    JSON.stringify({ ...Object.fromEntries(labels.slice(0, n).map((l, i) => [l, i])), ...extra });

  it('compares message drops with messages and value drops with values, each reason as it counts', () => {
    const expr = exprOf('IngestDropsRising');
    expect(expr).toContain(`reason=~"${dropReasonsCounting('message').join('|')}"`);
    expect(expr).toContain(`reason=~"${dropReasonsCounting('value').join('|')}"`);
  });

  // Before, every drop was compared with the messages received: one unknown key in a message
  // of 21 values (4.8 % of the values, no message dropped) counted as 100 %.
  it('does not fire for one unknown key among 21 values in each message (under 5 % of values, no message dropped)', async () => {
    expect(
      await firesFor(
        Array.from({ length: 200 }, () => values(20, { extra: 1 })),
        200,
      ),
    ).toBe(false);
  });

  it('fires for 10 % of messages dropped (not JSON)', async () => {
    expect(
      await firesFor(
        Array.from({ length: 200 }, (_, i) => (i % 10 === 0 ? '{not json' : values(20))),
        20,
      ),
    ).toBe(true);
  });

  it('fires for 10 % of values dropped (2 of 20 of the wrong type in each message)', async () => {
    expect(
      await firesFor(
        Array.from({ length: 200 }, () => values(18, { v18: 'x', v19: 'y' })),
        400,
      ),
    ).toBe(true);
  });
});
