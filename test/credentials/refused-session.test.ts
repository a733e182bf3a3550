// A login refused at the embedded broker never held the client id it named (docs/credentials.md
// §3, client ids): it must leave the session kept under that client id alone. aedes, closing a
// client that asked for a clean session, drops the QoS 2 messages awaiting their PUBREL kept
// under its client id, also for a client whose login was refused; before (found by an audit) a
// client that knew a device's client id and sent a CONNECT with it (clean session, any
// password) wiped them, and the device's next resend of such a message (MQTT-4.3.3-2) was taken
// in a second time.
import net from 'node:net';
import crypto from 'node:crypto';
import mqttPacket from 'mqtt-packet';
import { beforeAll, describe, expect, it } from 'vitest';
import { useService } from '../helpers/service.js';
import { historyCount } from '../helpers/registry-fixtures.js';
import { connackCode, newCredential, newDevice, type Tenant, twoTenants } from './fixtures.js';

const IDENTIFIER_REJECTED = 2;
const BAD_LOGIN = 4;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A raw MQTT 3.1.1 connection, to hold a QoS 2 message between its PUBREC and its PUBREL. */
async function rawDevice(port: number, clientId: string, username: string, password: string) {
  const s = net.connect(port, '127.0.0.1');
  const parser = mqttPacket.parser();
  const waiters: Array<{ cmd: string; resolve: () => void }> = [];
  parser.on('packet', (p) => {
    for (const w of [...waiters]) {
      if (w.cmd !== p.cmd) continue;
      waiters.splice(waiters.indexOf(w), 1);
      w.resolve();
    }
  });
  s.on('data', (d) => parser.parse(d));
  const next = (cmd: string) => new Promise<void>((resolve) => waiters.push({ cmd, resolve }));
  await new Promise((r) => s.once('connect', r));
  const connack = next('connack');
  s.write(
    mqttPacket.generate({
      cmd: 'connect',
      protocolId: 'MQTT',
      protocolVersion: 4,
      clean: false,
      keepalive: 60,
      clientId,
      username,
      password: Buffer.from(password),
    }),
  );
  await connack;
  return { s, next };
}

describe('a refused login and the session of the client id it named (MQTT_DEVICE_AUTH=required)', () => {
  const svc = useService({ MQTT_URL: undefined, MQTT_DEVICE_AUTH: 'required' });
  let a: Tenant;
  let b: Tenant;
  let url: string;

  beforeAll(async () => {
    ({ a, b, url } = await twoTenants(svc));
  });

  it("leaves the device's QoS 2 messages awaiting their PUBREL: a resend is not taken in twice (found by an audit)", async () => {
    const d = await newDevice(svc, a);
    const cred = await newCredential(svc, a, d);
    const other = await newDevice(svc, b);
    const otherCred = await newCredential(svc, b, other);
    const clientId = `sensor-${crypto.randomBytes(4).toString('hex')}`;
    const device = await rawDevice(svc.service.mqttPort!, clientId, `${a.name}:${d}`, cred.secret);
    const publish = (dup: boolean) =>
      mqttPacket.generate({
        cmd: 'publish',
        topic: `${a.name}:${d}/attrs`,
        qos: 2,
        messageId: 7,
        payload: Buffer.from(JSON.stringify({ temperature: 5 })),
        retain: false,
        dup,
      });
    const pubrec = device.next('pubrec');
    device.s.write(publish(false));
    await pubrec;
    expect(await historyCount(svc.service.pool, a.name, d)).toBe(1);

    // Refused logins with the device's client id: a wrong password, another tenant's device.
    expect(await connackCode(url, { clientId, username: `${a.name}:${d}`, password: 'not-the-secret-at-all', clean: true })).toBe(
      BAD_LOGIN,
    );
    expect(await connackCode(url, { clientId, username: `${b.name}:${other}`, password: otherCred.secret, clean: true })).toBe(
      IDENTIFIER_REJECTED,
    );
    await sleep(200);

    // The device missed the PUBREC: it sends the message again (MQTT-4.3.3-2), then its PUBREL.
    const again = device.next('pubrec');
    device.s.write(publish(true));
    await again;
    const pubcomp = device.next('pubcomp');
    device.s.write(mqttPacket.generate({ cmd: 'pubrel', messageId: 7 }));
    await pubcomp;
    await sleep(300);
    expect(await historyCount(svc.service.pool, a.name, d)).toBe(1);
    device.s.destroy();
  });
});
