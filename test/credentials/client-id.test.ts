// A client id belongs to the device that logs in with it (docs/credentials.md §3): the embedded
// broker closes the connection holding a client id when a new one logs in with it (MQTT's
// session takeover), so another client must not be able to use a device's client id to push it
// off the broker or to take over its session. Found by an audit: an anonymous client, or a
// device of another tenant, disconnected any device whose client id it knew.
import crypto from 'node:crypto';
import { beforeAll, describe, expect, it } from 'vitest';
import { http, useService } from '../helpers/service.js';
import { closedByPeer } from '../helpers/registry-fixtures.js';
import { connackCode, connect, newCredential, newDevice, type Tenant, twoTenants } from './fixtures.js';

const IDENTIFIER_REJECTED = 2;
const BAD_LOGIN = 4;

/** Resolves true when the connection is still open after `ms`. */
async function stillOpen(c: { connected: boolean }, ms = 1500): Promise<boolean> {
  await new Promise((r) => setTimeout(r, ms));
  return c.connected;
}

describe('client ids and MQTT_DEVICE_AUTH=required', () => {
  const svc = useService({ MQTT_URL: undefined, MQTT_DEVICE_AUTH: 'required' });
  let a: Tenant;
  let b: Tenant;
  let url: string;

  beforeAll(async () => {
    ({ a, b, url } = await twoTenants(svc));
  });

  const clientId = () => `sensor-${crypto.randomBytes(4).toString('hex')}`;

  it("a client presenting no device name and a wrong password cannot take over a connected device's client id", async () => {
    const d = await newDevice(svc, a);
    const cred = await newCredential(svc, a, d);
    const id = clientId();
    const victim = await connect(url, { clientId: id, username: `${a.name}:${d}`, password: cred.secret });
    expect(await connackCode(url, { clientId: id, username: '', password: 'x' })).toBe(BAD_LOGIN);
    expect(await stillOpen(victim)).toBe(true);
    await victim.endAsync();
  });

  it('a device of another tenant cannot log in with a client id that names a device, or one a device uses', async () => {
    const victimDevice = await newDevice(svc, b);
    const victimCred = await newCredential(svc, b, victimDevice);
    const attacker = await newDevice(svc, a);
    const attackerCred = await newCredential(svc, a, attacker);
    const victimName = `${b.name}:${victimDevice}`;
    const attackerLogin = { username: `${a.name}:${attacker}`, password: attackerCred.secret };

    const named = await connect(url, { clientId: victimName, username: victimName, password: victimCred.secret });
    expect(await connackCode(url, { ...attackerLogin, clientId: victimName })).toBe(IDENTIFIER_REJECTED);
    expect(await stillOpen(named)).toBe(true);
    await named.endAsync();

    const id = clientId();
    const chosen = await connect(url, { clientId: id, username: victimName, password: victimCred.secret, clean: false });
    expect(await connackCode(url, { ...attackerLogin, clientId: id })).toBe(IDENTIFIER_REJECTED);
    expect(await stillOpen(chosen)).toBe(true);
    await chosen.endAsync();
    // Nor its persistent session once the connection is gone (subscriptions and queued
    // messages stay the device's).
    expect(await connackCode(url, { ...attackerLogin, clientId: id, clean: false })).toBe(IDENTIFIER_REJECTED);
  });

  it('the device itself takes its client id over (a reconnect while the old connection lingers)', async () => {
    const d = await newDevice(svc, a);
    const cred = await newCredential(svc, a, d);
    const id = clientId();
    const login = { clientId: id, username: `${a.name}:${d}`, password: cred.secret };
    const old = await connect(url, login);
    const closed = closedByPeer(old);
    const next = await connect(url, login);
    await closed;
    expect(next.connected).toBe(true);
    await next.endAsync();
  });

  it('once the device is removed its client id is free for another device', async () => {
    const d = await newDevice(svc, a);
    const cred = await newCredential(svc, a, d);
    const id = clientId();
    const c = await connect(url, { clientId: id, username: `${a.name}:${d}`, password: cred.secret, clean: false });
    await c.endAsync();
    const other = await newDevice(svc, a);
    const otherCred = await newCredential(svc, a, other);
    const otherLogin = { clientId: id, username: `${a.name}:${other}`, password: otherCred.secret };
    expect(await connackCode(url, otherLogin)).toBe(IDENTIFIER_REJECTED);
    expect((await http('DELETE', `${svc.base}/device/${d}`, { token: a.token })).status).toBe(200);
    expect(await connackCode(url, otherLogin)).toBe(0);
  });

  // decisions.md, "Device messages (MQTT)": a device is named by its username `<tenant>:<id>`
  // (default mode), or by its client id `<tenant>:<id>`, else by its legacy topic. A clean
  // session ends with its connection (MQTT-3.1.2-6): once it is gone there is nothing left to
  // push off or take over, and another device's contract login with that client id is not
  // refused (found by an audit: it was, until a restart, and a legacy client was held to the
  // device an earlier connection had published for).
  it("a client id whose clean session ended is free for another device's login", async () => {
    const first = await newDevice(svc, a);
    const firstCred = await newCredential(svc, a, first);
    const second = await newDevice(svc, a);
    const secondCred = await newCredential(svc, a, second);
    const id = clientId();
    const c = await connect(url, { clientId: id, username: `${a.name}:${first}`, password: firstCred.secret });
    await c.endAsync();
    expect(await connackCode(url, { clientId: id, username: `${a.name}:${second}`, password: secondCred.secret })).toBe(0);
  });

  it('a legacy client is named by its topic, not by the device an ended clean session of its client id published for', async () => {
    const first = await newDevice(svc, a);
    const firstCred = await newCredential(svc, a, first);
    const second = await newDevice(svc, a);
    const secondCred = await newCredential(svc, a, second);
    const id = clientId();
    const c = await connect(url, { clientId: id, username: '', password: firstCred.secret });
    await c.publishAsync(`/${a.name}/${first}/attrs`, JSON.stringify({ temperature: 1 }), { qos: 1 });
    await c.endAsync();
    const next = await connect(url, { clientId: id, username: '', password: secondCred.secret });
    await next.publishAsync(`/${a.name}/${second}/attrs`, JSON.stringify({ temperature: 2 }), { qos: 1 });
    expect(await stillOpen(next, 500)).toBe(true);
    await next.endAsync();
  });
});
