// A login being checked when the embedded broker hears that registry events were missed
// (tenant.changed) is read again before it is accepted (docs/credentials.md §3). A credential
// deleted while that second read is under way must refuse the login as it does during the first
// one: the client is not bound yet, so the deletion's event closes nothing. The registry's
// answers are held back here (the check 50 ms, the second read 150 ms) so that the events
// surely come while each is under way.
import net from 'node:net';
import mqttPacket from 'mqtt-packet';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEmbeddedBroker, type EmbeddedBroker } from '../../src/broker/embedded.js';
import { DeviceAuthorisation } from '../../src/broker/device-auth.js';
import type { LoginCheck, LoginVerdict } from '../../src/registry/credentials/logins.js';
import { createLogger } from '../../src/log.js';

const delay = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The registry as it was read: the credential exists (each read started before its deletion). */
const slowLogins: LoginCheck = {
  check: () => delay(50).then((): LoginVerdict => ({ ok: true, credentialId: 'cred-1' })),
  standing: (logins) => delay(150).then(() => logins.map(() => 'holds' as const)),
  settle: () => undefined,
};

let auth: DeviceAuthorisation;
let broker: EmbeddedBroker;

beforeAll(async () => {
  const log = createLogger('silent');
  auth = new DeviceAuthorisation(slowLogins, 'required', { accept() {}, refuse() {} }, log);
  broker = await startEmbeddedBroker({ host: '127.0.0.1', port: 0, log, hooks: auth.hooks() });
});
afterAll(() => broker?.close());

/** The CONNACK return code of one login of acme:dev1, `during` run while it is checked. */
function login(during: () => Promise<void>): Promise<number> {
  const connect = mqttPacket.generate({
    cmd: 'connect',
    protocolId: 'MQTT',
    protocolVersion: 4,
    clientId: 'missed-events-login',
    clean: true,
    keepalive: 30,
    username: 'acme:dev1',
    password: Buffer.from('a-password-of-enough-length'),
  });
  return new Promise((resolve, reject) => {
    const parser = mqttPacket.parser({ protocolVersion: 4 });
    parser.on('packet', (p) => {
      if (p.cmd !== 'connack') return;
      s.end();
      resolve(p.returnCode ?? -1);
    });
    const s = net.connect(Number(broker.port), '127.0.0.1', () => {
      s.write(connect);
      during().catch(reject);
    });
    s.on('data', (d) => parser.parse(d));
    s.on('error', reject);
  });
}

describe('a login checked again after missed events', () => {
  it('is accepted when nothing else happens (the control case)', async () => {
    const code = await login(async () => {
      await delay(20);
      auth.registryChanged({ type: 'tenant.changed', tenant: '*' });
    });
    expect(code).toBe(0);
  });

  it('is refused when its credential is deleted during the second read', async () => {
    const code = await login(async () => {
      await delay(20);
      auth.registryChanged({ type: 'tenant.changed', tenant: '*' });
      await delay(100); // the check has answered; the second read is under way
      auth.registryChanged({ type: 'credentials.changed', tenant: 'acme', deviceId: 'dev1', removedIds: ['cred-1'] });
    });
    expect(code).toBe(4);
  });

  it('is refused when its device is removed during the second read', async () => {
    const code = await login(async () => {
      await delay(20);
      auth.registryChanged({ type: 'tenant.changed', tenant: '*' });
      await delay(100);
      auth.registryChanged({ type: 'devices.removed', tenant: 'acme', deviceIds: ['dev1'] });
    });
    expect(code).toBe(4);
  });
});
