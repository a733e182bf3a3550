// Issue 19, "kill -9 of the router thread during ingest": devices publish numbered QoS 1 messages
// without pause while the test terminates the ingest router thread (Worker.terminate(): the thread
// ends mid-work, no cleanup runs in it). The service starts it again (src/ingest/index.ts, after
// FIRST_RESTART_MS) and ingest goes on: every message whose PUBACK a device saw is stored (0 lost).
// Messages stored twice (committed, their ack gone with the thread, delivered again) are allowed:
// counted and printed. The Worker is captured by wrapping worker_threads.Worker here (after
// syncBuiltinESMExports src's named import sees the wrapper): no hook in production code.
// External mode: the test's own Mosquitto (test/ingest/fixtures/mosquitto.conf) keeps the
// subscriber sessions; the new thread resumes them and gets what was unacknowledged again.
// Embedded mode: aedes dies with the thread; the devices reconnect (a fixed MQTT_PORT) and resend
// their unacknowledged publishes. Without the mosquitto binary the external case fails on CI or
// with TEST_MQTT_URL, and says it is skipped otherwise.
import crypto from 'node:crypto';
import { syncBuiltinESMExports } from 'node:module';
import path from 'node:path';
import workerThreads from 'node:worker_threads';
import type mqtt from 'mqtt';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../../src/net.js';
import { projectRoot } from '../../src/paths.js';
import { http, useService } from '../helpers/service.js';
import { mosquittoBinary, startMosquitto, type Mosquitto } from '../helpers/mosquitto.js';
import { createDevice, createTemplate, deviceClient, eventually } from '../helpers/registry-fixtures.js';
import { checkSequence, metricOf } from '../helpers/faults.js';

const DEVICES = 4;
const WINDOW = 8;
const hasMosquitto = mosquittoBinary() !== undefined;
if (!hasMosquitto) {
  if (process.env.CI || process.env.TEST_MQTT_URL) throw new Error('test/ingest/router-death.test.ts needs the mosquitto binary');
  console.warn('SKIPPED the external-broker case of test/ingest/router-death.test.ts: the mosquitto binary is not installed');
}

const OriginalWorker = workerThreads.Worker;
const routerThreads: workerThreads.Worker[] = [];
class CapturingWorker extends OriginalWorker {
  constructor(filename: string | URL, options?: workerThreads.WorkerOptions) {
    super(filename, options);
    if (String(filename).includes('router-thread')) routerThreads.push(this);
  }
}
beforeAll(() => {
  workerThreads.Worker = CapturingWorker;
  syncBuiltinESMExports();
});
afterAll(() => {
  workerThreads.Worker = OriginalWorker;
  syncBuiltinESMExports();
});

describe.each([...(hasMosquitto ? ['external'] : []), 'embedded'])('the router thread killed during ingest (%s broker)', (mode) => {
  let broker: Mosquitto | undefined;
  let mqttPort = 0;
  beforeAll(async () => {
    routerThreads.length = 0;
    if (mode === 'external') broker = await startMosquitto(path.join(projectRoot, 'test/ingest/fixtures/mosquitto.conf'));
    else mqttPort = await freePort();
  });
  afterAll(() => broker?.stop());
  const svc = useService(() =>
    mode === 'external'
      ? { MQTT_URL: broker?.url, MQTT_SUBSCRIBER_CONNECTIONS: '2' }
      : { MQTT_URL: undefined, MQTT_PORT: String(mqttPort) },
  );
  const tenant = `rd${crypto.randomBytes(3).toString('hex')}`;
  const devices: string[] = [];
  let db: pg.Pool;
  beforeAll(async () => {
    db = new pg.Pool({ connectionString: svc.env.DATABASE_URL, max: 2 });
    const t = await createTemplate(db, tenant, 't', [{ label: 'seq', type: 'dynamic', value_type: 'integer' }]);
    for (let i = 0; i < DEVICES; i++) devices.push(await createDevice(db, tenant, [t]));
  });
  afterAll(() => db?.end());

  it('starts it again; every acknowledged message is stored, duplicates counted', { timeout: 90_000 }, async () => {
    const url = broker?.url ?? `mqtt://127.0.0.1:${svc.service.mqttPort}`;
    expect(routerThreads).toHaveLength(1); // the wrapper saw the service's router thread start
    const acked: number[] = [];
    const clients: mqtt.MqttClient[] = [];
    const lanes: Array<Promise<void>> = [];
    let running = true;
    let next = 0;
    for (const id of devices) {
      const c = await deviceClient(url, { username: `${tenant}:${id}`, reconnectPeriod: 200, clientId: `rd-${id}` });
      clients.push(c);
      const lane = async () => {
        while (running) {
          const n = next++;
          await c.publishAsync(`${tenant}:${id}/attrs`, JSON.stringify({ seq: n }), { qos: 1 }).then(
            () => void acked.push(n),
            () => new Promise((r) => setTimeout(r, 100)),
          );
        }
      };
      for (let w = 0; w < WINDOW; w++) lanes.push(lane());
    }
    try {
      await eventually(async () => (await metricOf(svc.base, 'ingest_messages_stored_total')) >= 300 || undefined, 'ingest running');
      const ackedAtKill = acked.length;
      await routerThreads[0]!.terminate();
      await eventually(() => routerThreads.length >= 2 || undefined, 'the router thread started again', 10_000);
      await eventually(async () => (await metricOf(svc.base, 'broker_link_up')) === 1 || undefined, 'the broker link up again');
      const storedAfter = await metricOf(svc.base, 'ingest_messages_stored_total');
      await eventually(
        async () => (await metricOf(svc.base, 'ingest_messages_stored_total')) >= storedAfter + 300 || undefined,
        'ingest going on after the restart',
      );
      await eventually(() => acked.length >= ackedAtKill + 500 || undefined, 'devices acknowledged after the restart');
    } finally {
      running = false;
      // Bounded: with no router thread (embedded) in-flight publishes would wait forever.
      await Promise.race([Promise.all(lanes), new Promise((r) => setTimeout(r, 20_000))]);
      await Promise.all(clients.map((c) => c.endAsync(true)));
    }
    const check = await eventually(async () => {
      const c = await checkSequence(db, tenant, acked);
      return c.lost.length === 0 && c;
    }, 'every acknowledged message stored').catch(async () => checkSequence(db, tenant, acked));
    console.log(
      `router thread killed (${mode} broker): ${acked.length} acknowledged to devices, ${check.stored} stored, ` +
        `${check.lost.length} lost, ${check.duplicates} stored twice, router thread started ${routerThreads.length} times`,
    );
    expect(check.lost).toEqual([]);
    expect(routerThreads).toHaveLength(2);
    expect((await http('GET', `${svc.base}/health`)).status).toBe(200);
    expect(await metricOf(svc.base, 'broker_link_up')).toBe(1);
  });
});
