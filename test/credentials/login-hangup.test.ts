// A client that hangs up while its login is being checked (a slow registry answer, a device
// that gives up on its CONNACK and reconnects) leaves nothing behind in the embedded broker's
// device authorisation: aedes drops such a client without a clientDisconnect, so the login's
// bookkeeping must not outlive the connection. The registry answer is held back here (100 ms)
// so that the hang-up surely comes first.
import net from 'node:net';
import type { Client } from 'aedes';
import mqttPacket from 'mqtt-packet';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEmbeddedBroker, type EmbeddedBroker } from '../../src/broker/embedded.js';
import { DeviceAuthorisation } from '../../src/broker/device-auth.js';
import type { LoginCheck, LoginVerdict } from '../../src/registry/credentials/logins.js';
import { createLogger } from '../../src/log.js';

const slowLogins: LoginCheck = {
  check: () =>
    new Promise<LoginVerdict>((resolve) =>
      setTimeout(() => resolve({ ok: true, credentialId: 'cred-1', expiresMs: Date.now() + 3_600_000 }), 100),
    ),
  standing: (logins) => Promise.resolve(logins.map(() => 'holds' as const)),
  settle: () => undefined,
};

let auth: DeviceAuthorisation;
let broker: EmbeddedBroker;

beforeAll(async () => {
  const log = createLogger('silent');
  auth = new DeviceAuthorisation(slowLogins, 'optional', { accept() {}, refuse() {} }, log);
  broker = await startEmbeddedBroker({ host: '127.0.0.1', port: 0, log, hooks: auth.hooks() });
  const forget = (client: Client) => auth.disconnected(client);
  broker.aedes.on('clientDisconnect', forget);
  broker.aedes.on('clientError', forget);
});
afterAll(() => broker?.close());

/** The clients the authorisation still holds for device acme/dev1 and for credential cred-1. */
function held(): { device: number; credential: number } {
  // Private fields of DeviceAuthorisation: what it holds is what this file checks.
  const inner = auth as unknown as { sessions: Map<string, Set<Client>>; byCredential: Map<string, Set<Client>> };
  return { device: inner.sessions.get('acme/dev1')?.size ?? 0, credential: inner.byCredential.get('cred-1')?.size ?? 0 };
}

const connect = mqttPacket.generate({
  cmd: 'connect',
  protocolId: 'MQTT',
  protocolVersion: 4,
  clientId: 'hangup',
  clean: true,
  keepalive: 30,
  username: 'acme:dev1',
  password: Buffer.from('a-password-of-enough-length'),
});

/** One CONNECT; `hangUp`: the socket is destroyed before the login's answer, else it waits for its CONNACK and ends. */
function connectOnce(hangUp: boolean): Promise<void> {
  return new Promise((resolve, reject) => {
    const s = net.connect(Number(broker.port), '127.0.0.1', () => {
      s.write(connect);
      if (hangUp) {
        setTimeout(() => {
          s.destroy();
          resolve();
        }, 10);
      } else {
        s.once('data', () => s.end());
        s.once('close', () => resolve());
      }
    });
    s.on('error', reject);
  });
}

async function settled(): Promise<void> {
  await new Promise((r) => setTimeout(r, 300));
}

describe('a login cut short by the client', () => {
  it('connections that ended normally are forgotten (the control case)', async () => {
    for (let i = 0; i < 10; i++) await connectOnce(false);
    await settled();
    expect(held()).toEqual({ device: 0, credential: 0 });
  });

  it('connections that hung up during the login check are forgotten too', async () => {
    for (let i = 0; i < 20; i++) await connectOnce(true);
    await settled();
    expect(broker.aedes.connectedClients).toBe(0);
    expect(held()).toEqual({ device: 0, credential: 0 });
  });
});
