// What the embedded broker keeps of a device's sessions (found by an audit): aedes keeps a
// persistent session (clean: false) forever, its subscriptions and the QoS 2 messages awaiting
// their PUBREL with it, so one device credential logging in under ever new client ids, each
// time leaving 1,000 QoS 2 messages of 64 KiB unreleased, grew the service's memory by 64 MiB a
// client id, without bound (measured: +30 MiB for each 1,000 × 16 kB). Now a device keeps at
// most SESSIONS_PER_DEVICE persistent sessions under client ids that do not name it, a QoS 2
// message awaiting its PUBREL is kept without its payload, and a removed device's sessions go
// with it (another device logging in with its client id no longer inherited its subscriptions).
import crypto from 'node:crypto';
import net from 'node:net';
import mqtt from 'mqtt';
import mqttPacket from 'mqtt-packet';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SESSIONS_PER_DEVICE } from '../../src/broker/device-auth.js';
import { startEmbeddedBroker, type EmbeddedBroker } from '../../src/broker/embedded.js';
import { createLogger } from '../../src/log.js';
import { RegistryEvents, type RegistryEvent } from '../../src/registry/events.js';
import { freshDatabase, http, useService } from '../helpers/service.js';
import { newCredential, newDevice, newTenant, type Tenant } from './fixtures.js';

/** Logs in, subscribes to `topic` when given, hangs up; resolves the CONNACK's session present flag. */
function session(url: string, opts: mqtt.IClientOptions, topic?: string): Promise<boolean> {
  return new Promise((resolve, reject) => {
    const c = mqtt.connect(url, { protocolVersion: 4, reconnectPeriod: 0, connectTimeout: 10_000, clean: false, ...opts });
    c.once('error', reject);
    c.once('connect', (connack) => {
      const done = () => c.end(false, {}, () => resolve(connack.sessionPresent));
      if (topic) c.subscribe(topic, { qos: 1 }, (err) => (err ? reject(err) : done()));
      else done();
    });
  });
}

describe('persistent sessions of the embedded broker (MQTT_DEVICE_AUTH=required)', () => {
  const svc = useService({ MQTT_URL: undefined, MQTT_DEVICE_AUTH: 'required' });
  let t: Tenant;
  let url: string;

  beforeAll(async () => {
    url = `mqtt://127.0.0.1:${svc.service.mqttPort}`;
    t = await newTenant(svc);
  });

  it(`a device keeps at most ${SESSIONS_PER_DEVICE} persistent sessions under other client ids: the oldest goes`, async () => {
    const d = await newDevice(svc, t);
    const cred = await newCredential(svc, t, d);
    const login = { username: `${t.name}:${d}`, password: cred.secret };
    const prefix = `s-${crypto.randomBytes(3).toString('hex')}`;
    for (let i = 0; i <= SESSIONS_PER_DEVICE; i++) {
      expect(await session(url, { ...login, clientId: `${prefix}-${i}` }, `${t.name}:${d}/config`)).toBe(false);
    }
    expect(await session(url, { ...login, clientId: `${prefix}-${SESSIONS_PER_DEVICE}` })).toBe(true);
    expect(await session(url, { ...login, clientId: `${prefix}-0` })).toBe(false);
  });

  it("a removed device's persistent session is not inherited by the next device using its client id", async () => {
    const d = await newDevice(svc, t);
    const cred = await newCredential(svc, t, d);
    const clientId = `r-${crypto.randomBytes(4).toString('hex')}`;
    await session(url, { username: `${t.name}:${d}`, password: cred.secret, clientId }, `${t.name}:${d}/config`);
    expect((await http('DELETE', `${svc.base}/device/${d}`, { token: t.token })).status).toBe(200);
    const other = await newDevice(svc, t);
    const otherCred = await newCredential(svc, t, other);
    // The deletion reaches the broker's thread through the registry event: allow it a moment.
    await new Promise((r) => setTimeout(r, 500));
    expect(await session(url, { username: `${t.name}:${other}`, password: otherCred.secret, clientId })).toBe(false);
  });
});

describe('QoS 2 messages awaiting their PUBREL', () => {
  let broker: EmbeddedBroker;
  beforeAll(async () => {
    broker = await startEmbeddedBroker({ host: '127.0.0.1', port: 0, log: createLogger('silent') });
  });
  afterAll(() => broker?.close());

  it('are kept without their payload, and still delivered whole', async () => {
    const topic = 'acme:dev1/attrs';
    const delivered = new Promise<Buffer>((resolve) => {
      void broker.aedes.subscribe(
        topic,
        (packet, cb) => {
          resolve(packet.payload as Buffer);
          cb();
        },
        () => undefined,
      );
    });
    const s = net.connect(broker.port!, '127.0.0.1');
    const parser = mqttPacket.parser();
    const pubrec = new Promise<void>((resolve) => parser.on('packet', (p) => p.cmd === 'pubrec' && resolve()));
    s.on('data', (d) => parser.parse(d));
    await new Promise((r) => s.once('connect', r));
    s.write(mqttPacket.generate({ cmd: 'connect', protocolId: 'MQTT', protocolVersion: 4, clean: false, keepalive: 60, clientId: 'q2' }));
    const payload = Buffer.alloc(60_000, 'x');
    s.write(mqttPacket.generate({ cmd: 'publish', topic, qos: 2, messageId: 7, payload, retain: false, dup: false }));
    await pubrec;
    expect((await delivered).length).toBe(payload.length);
    // aedes's `persistence` is not in its typed API.
    const { persistence } = broker.aedes as unknown as {
      persistence: { incomingGetPacket(c: { id: string }, p: { messageId: number }): Promise<{ payload: Buffer }> };
    };
    expect((await persistence.incomingGetPacket({ id: 'q2' }, { messageId: 7 })).payload.length).toBe(0);
    s.destroy();
  });
});

describe('a bulk device removal heard by other instances (found by an audit)', () => {
  // Their embedded brokers close the MQTT connections of exactly the devices named by
  // `devices.removed`; one too large for a NOTIFY (more than about 700 ids) went to them as a
  // tenant-wide event, which drops caches but closes nothing: those devices stayed connected.
  it('goes as several devices.removed notifications, together naming every device', async () => {
    const databaseUrl = await freshDatabase();
    const pool = new pg.Pool({ connectionString: databaseUrl, max: 2 });
    const here = new RegistryEvents(pool, databaseUrl, createLogger('silent'));
    const there = new RegistryEvents(pool, databaseUrl, createLogger('silent'));
    try {
      const heard: RegistryEvent[] = [];
      there.on((e) => heard.push(e));
      await there.start();
      const ids = Array.from({ length: 3000 }, (_, i) => i.toString(16).padStart(6, '0'));
      await here.change(async (_c, announce) => announce({ type: 'devices.removed', tenant: 'acme', deviceIds: ids }));
      await new Promise((r) => setTimeout(r, 1000));
      expect(heard.filter((e) => e.type !== 'devices.removed')).toEqual([]);
      expect(heard.length).toBeGreaterThan(1);
      expect(heard.flatMap((e) => (e.type === 'devices.removed' && e.tenant === 'acme' ? e.deviceIds : []))).toEqual(ids);
    } finally {
      await here.close();
      await there.close();
      await pool.end();
    }
  });
});
