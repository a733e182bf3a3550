// A device that publishes its telemetry with the retain flag (some firmwares set it on every
// message) through an external broker: the broker keeps the last message of the topic and
// sends that copy again, retain flag set, whenever a subscription to the topic is made, and the
// service subscribes at every connect of each of its subscriber connections (a start, a
// restart, a reconnect after the broker or the network went away). The copy is no new message:
// it was stored when it came in. Before (found by an audit), every such subscription stored it
// again with the time it arrived, a stale value as a fresh reading (the device seen online):
// Mosquitto 2.0.11 sends retained messages to shared subscriptions too, so a restart of the
// service with 4 subscriber connections stored one retained message 4 more times. Now the MQTT 5
// subscription asks for no retained messages (Retain Handling 2). MQTT 3.1.1 has no such option,
// and its retain flag does not tell a copy from a message queued while the service was away
// (aedes keeps the flag as published there): nothing may be lost, copies are stored again.
import crypto from 'node:crypto';
import net from 'node:net';
import path from 'node:path';
import { Aedes } from 'aedes';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { projectRoot } from '../../src/paths.js';
import { freePort } from '../../src/net.js';
import { startTestService, type TestService } from '../helpers/service.js';
import { mosquittoBinary, startMosquitto, type Mosquitto } from '../helpers/mosquitto.js';
import { createDevice, createTemplate, deviceClient, eventually } from '../helpers/registry-fixtures.js';

/** The stored values of `seq` of the device, oldest first. */
async function stored(db: pg.Pool, tenant: string, id: string): Promise<number[]> {
  const { rows } = await db.query<{ value: string }>(
    `SELECT value FROM history WHERE tenant = $1 AND device_id = $2 AND attr = 'seq' ORDER BY ts`,
    [tenant, id],
  );
  return rows.map((r) => Number(r.value));
}

/**
 * The device publishes seq 1 retained and seq 2 not; the service is stopped (with `whileAway`,
 * the device publishes seq 3 retained meanwhile), the service starts again (its subscribers
 * subscribe again) and the device publishes seq 4. Returns the stored values.
 */
async function retainedAcrossRestart(brokerUrl: string, subscriberConnections: string, whileAway: boolean): Promise<number[]> {
  let svc: TestService | undefined = await startTestService({ MQTT_URL: brokerUrl, MQTT_SUBSCRIBER_CONNECTIONS: subscriberConnections });
  const db = new pg.Pool({ connectionString: svc.env.DATABASE_URL, max: 2 });
  const tenant = `rr${crypto.randomBytes(3).toString('hex')}`;
  try {
    const t = await createTemplate(db, tenant, 't', [{ label: 'seq', type: 'dynamic', value_type: 'integer' }]);
    const id = await createDevice(db, tenant, [t]);
    const topic = `${tenant}:${id}/attrs`;
    const device = await deviceClient(brokerUrl, { username: `${tenant}:${id}` });
    try {
      await device.publishAsync(topic, JSON.stringify({ seq: 1 }), { qos: 1, retain: true });
      await device.publishAsync(topic, JSON.stringify({ seq: 2 }), { qos: 1 });
      await eventually(async () => (await stored(db, tenant, id)).length >= 2, 'seq 1 and 2 stored');
      const env = svc.env;
      await svc.stop();
      svc = undefined;
      // Published while the service is away: queued in its sessions, retained by the broker.
      if (whileAway) await device.publishAsync(topic, JSON.stringify({ seq: 3 }), { qos: 1, retain: true });
      svc = await startTestService(env);
      await device.publishAsync(topic, JSON.stringify({ seq: 4 }), { qos: 1 });
      await eventually(async () => (await stored(db, tenant, id)).includes(4), 'seq 4 stored');
      // Whatever the subscriptions brought is in by now (it came before seq 3 on each connection,
      // and seq 3 went to one of them): a moment more for the others.
      await new Promise((r) => setTimeout(r, 500));
      return await stored(db, tenant, id);
    } finally {
      // The broker outlives the test file: leave no retained message behind.
      await device.publishAsync(topic, '', { qos: 1, retain: true });
      await device.endAsync();
    }
  } finally {
    await svc?.stop();
    await db.end();
  }
}

describe.skipIf(!mosquittoBinary())('a retained device message, Mosquitto (MQTT 5 shared subscription)', () => {
  let broker: Mosquitto;
  beforeAll(async () => {
    broker = await startMosquitto(path.join(projectRoot, 'test/ingest/fixtures/mosquitto.conf'));
  });
  afterAll(() => broker?.stop());

  it('is stored once, not again each time a subscriber connection subscribes', async () => {
    // Before: [1, 2, 1, 1, 1, 1, 4] (seq 1's retained copy once per subscriber connection).
    expect(await retainedAcrossRestart(broker.url, '4', false)).toEqual([1, 2, 4]);
  });
});

describe('a retained device message, a broker without MQTT 5 (aedes)', () => {
  let broker: Aedes;
  let server: net.Server;
  let url: string;
  beforeAll(async () => {
    broker = await Aedes.createBroker();
    server = net.createServer(broker.handle);
    const port = await freePort();
    await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
    url = `mqtt://127.0.0.1:${port}`;
  });
  afterAll(() => new Promise<void>((resolve) => broker.close(() => server.close(() => resolve()))));

  it('is never lost: seq 3, queued with its retain flag while the service was away, is stored', async () => {
    // (Taking the retain flag for a copy's, and dropping such messages, lost seq 3: [1, 2, 4].)
    const values = await retainedAcrossRestart(url, '1', true);
    expect([...new Set(values)].sort()).toEqual([1, 2, 3, 4]);
  });
});
