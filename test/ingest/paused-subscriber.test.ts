// Fault 1 of issue 19: a subscriber connection paused by backpressure (the database is away,
// the receive window full) read nothing, not even the broker's PINGRESPs, and its own
// keepalive check hung up after 1.5 × keepalive, reconnected in a loop, forgot its pending acks
// and had the broker send those messages again (stored twice). A paused connection keeps
// pinging and stays up: no reconnect, nothing lost, nothing stored twice. The same outage with
// the embedded broker (the window is the router's INGEST_MAX_PENDING; the device gets no PUBACK
// before the commit, and the broker reads nothing more from it): the device's connection stays
// (src/broker/held-keepalive.ts), nothing lost, nothing stored twice.
// The outage lasts 4 × keepalive (8 s); FAULT_OUTAGE_SECONDS=90 makes it the full 90 s.
import crypto from 'node:crypto';
import path from 'node:path';
import type mqtt from 'mqtt';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { projectRoot } from '../../src/paths.js';
import { startTestService, type TestService } from '../helpers/service.js';
import { mosquittoBinary, startMosquitto, type Mosquitto } from '../helpers/mosquitto.js';
import { createDevice, createTemplate, deviceClient, eventually, historyCount } from '../helpers/registry-fixtures.js';
import { checkSequence, gaugeSum, metricOf, publishSequence, takeDatabaseAway } from '../helpers/faults.js';

const KEEPALIVE_SECONDS = 2;
const MAX_PENDING = 100; // the smallest INGEST_MAX_PENDING
const MESSAGES = 400;
const OUTAGE_MS = Number(process.env.FAULT_OUTAGE_SECONDS ?? KEEPALIVE_SECONDS * 4) * 1000;

/**
 * One message stored, then the database away for OUTAGE_MS with MESSAGES numbered QoS 1
 * messages sent (the window full), then back: every message acknowledged and stored exactly
 * once. `whilePaused` checks the connections at the end of the outage.
 */
async function outageWithFullWindow(
  svc: TestService,
  client: mqtt.MqttClient,
  tenant: string,
  device: string,
  whilePaused: () => Promise<void>,
): Promise<void> {
  const topic = `${tenant}:${device}/attrs`;
  const db = new pg.Pool({ connectionString: svc.env.DATABASE_URL, max: 2 });
  db.on('error', () => undefined); // its idle connections are ended by the outage too
  try {
    expect(await publishSequence(client, topic, 0, 1)).toEqual([0]);
    await eventually(async () => (await historyCount(db, tenant, device)) === 1 || undefined, 'the first value');
    const restore = await takeDatabaseAway(svc.env.DATABASE_URL!);
    let acked: Promise<number[]>;
    try {
      acked = publishSequence(client, topic, 1, MESSAGES);
      // The receive window fills: the router holds INGEST_MAX_PENDING and pauses the connections.
      await eventually(async () => (await gaugeSum(svc.base, 'ingest_queue_depth')) >= MAX_PENDING || undefined, 'a full window');
      // Paused for well over 1.5 × keepalive (where the connection used to hang up).
      await new Promise((r) => setTimeout(r, OUTAGE_MS));
      await whilePaused();
    } finally {
      await restore();
    }
    const numbers = await acked;
    expect(numbers).toHaveLength(MESSAGES);
    await eventually(async () => (await historyCount(db, tenant, device)) >= MESSAGES + 1 || undefined, 'every message stored', 30_000);
    // Let anything sent twice arrive too before counting.
    await new Promise((r) => setTimeout(r, 1000));
    expect(await checkSequence(db, tenant, [0, ...numbers])).toEqual({ lost: [], duplicates: 0, stored: MESSAGES + 1 });
  } finally {
    await db.end();
  }
}

// Mosquitto of the test's own (MQTT 5, shared subscription: the production setup). Without the
// binary the test fails: it must not pass without the broker it is about.
describe('a subscriber connection paused through a database outage (Mosquitto)', () => {
  let broker: Mosquitto;
  let svc: TestService;
  const tenant = `ps${crypto.randomBytes(3).toString('hex')}`;
  let device: string;

  beforeAll(async () => {
    if (!mosquittoBinary()) throw new Error('this test needs mosquitto installed (apt-get install mosquitto)');
    broker = await startMosquitto(path.join(projectRoot, 'test/ingest/fixtures/mosquitto.conf'));
    svc = await startTestService({
      MQTT_URL: broker.url,
      MQTT_KEEPALIVE_SECONDS: String(KEEPALIVE_SECONDS),
      INGEST_MAX_PENDING: String(MAX_PENDING),
      MQTT_SUBSCRIBER_CONNECTIONS: '2',
    });
    const t = await createTemplate(svc.service.pool, tenant, 't', [{ label: 'seq', type: 'dynamic', value_type: 'integer' }]);
    device = await createDevice(svc.service.pool, tenant, [t]);
  });
  afterAll(async () => {
    await svc?.stop();
    await broker?.stop();
  });

  it(
    'stays connected, and stores every message once when the database is back',
    async () => {
      const client = await deviceClient(svc.env.MQTT_URL!);
      try {
        const reconnectsBefore = await metricOf(svc.base, 'broker_link_reconnects_total');
        await outageWithFullWindow(svc, client, tenant, device, async () => {
          expect(await gaugeSum(svc.base, 'broker_link_connections{state="connected"}')).toBe(3); // 2 subscribers, the publisher
        });
        expect(await metricOf(svc.base, 'broker_link_reconnects_total')).toBe(reconnectsBefore);
      } finally {
        await client.endAsync();
      }
    },
    OUTAGE_MS + 60_000,
  );
});

describe('a database outage with the receive window full (embedded broker)', () => {
  let svc: TestService;
  const tenant = `pe${crypto.randomBytes(3).toString('hex')}`;
  let device: string;

  beforeAll(async () => {
    svc = await startTestService({ MQTT_URL: undefined, INGEST_MAX_PENDING: String(MAX_PENDING) });
    const t = await createTemplate(svc.service.pool, tenant, 't', [{ label: 'seq', type: 'dynamic', value_type: 'integer' }]);
    device = await createDevice(svc.service.pool, tenant, [t]);
  });
  afterAll(() => svc?.stop());

  it(
    'keeps the device connected, and stores every message once when the database is back',
    async () => {
      // The device's keepalive is short too: both its own check and the broker's would fire in the outage.
      const client = await deviceClient(`mqtt://127.0.0.1:${svc.service.mqttPort}`, {
        username: `${tenant}:${device}`,
        keepalive: KEEPALIVE_SECONDS,
      });
      let closed = 0;
      client.on('close', () => closed++);
      try {
        await outageWithFullWindow(svc, client, tenant, device, () => {
          expect(closed).toBe(0);
          return Promise.resolve();
        });
        expect(closed).toBe(0);
      } finally {
        await client.endAsync();
      }
    },
    OUTAGE_MS + 60_000,
  );
});
