// Device logins to the embedded broker (docs/credentials.md) in each MQTT_DEVICE_AUTH mode:
// what gets in, what is refused and how (CONNACK 4, MQTT 5 0x86, a metric by reason), legacy
// layouts with credentials, rotation, and the connections a deletion, an expiry or a device
// removal ends.
import crypto from 'node:crypto';
import type pg from 'pg';
import { beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../src/log.js';
import { createMetrics } from '../../src/metrics.js';
import { CredentialHasher } from '../../src/registry/credentials/hashing.js';
import { DeviceLogins } from '../../src/registry/credentials/logins.js';
import { LoginMetrics } from '../../src/registry/credentials/metrics.js';
import { http, useService } from '../helpers/service.js';
import { closedByPeer, eventually, historyCount } from '../helpers/registry-fixtures.js';
import { connackCode, connect, deleteCredential, metricValue, newCredential, newDevice, newTenant, type Tenant } from './fixtures.js';
import type { CredentialView } from '../helpers/api.js';

const refusedMetric = (reason: string) => `device_logins_refused_total{reason="${reason}"}`;

describe('MQTT_DEVICE_AUTH=required', () => {
  const svc = useService({ MQTT_URL: undefined, MQTT_DEVICE_AUTH: 'required' });
  let t: Tenant;
  let url: string;

  beforeAll(async () => {
    url = `mqtt://127.0.0.1:${svc.service.mqttPort}`;
    t = await newTenant(svc);
  });

  const as = (device: string) => `${t.name}:${device}`;

  it('a device with a valid credential connects, publishes and is stored; the login is recorded as last used', async () => {
    const d = await newDevice(svc, t);
    const cred = await newCredential(svc, t, d);
    const c = await connect(url, { username: as(d), password: cred.secret });
    await c.publishAsync(`${as(d)}/attrs`, JSON.stringify({ temperature: 21.5 }), { qos: 1 });
    expect(await historyCount(svc.service.pool, t.name, d)).toBe(1);
    await c.endAsync();
    const used = await eventually(async () => {
      const [row] = (await http<CredentialView[]>('GET', `${svc.base}/device/${d}/credentials`, { token: t.token })).body;
      return row?.last_used_at ?? undefined;
    }, 'last_used_at');
    expect(used).toMatch(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}\+00:00$/);
  });

  it('every refused login is "bad user name or password" (4; MQTT 5 0x86), counted by reason', async () => {
    const d = await newDevice(svc, t);
    const bare = await newDevice(svc, t);
    const cred = await newCredential(svc, t, d);
    const reasons = ['unknown_device', 'no_credential', 'wrong', 'expired'] as const;
    const counts = async () => Promise.all(reasons.map((r) => metricValue(svc, refusedMetric(r))));
    const before = await counts();
    const expiring = await newCredential(svc, t, bare, { type: 'password', expires_at: new Date(Date.now() + 1500).toISOString() });
    const cases: Array<[string, object]> = [
      ['unknown_device', { username: as('ffffff'), password: cred.secret }],
      ['unknown_device', { username: `other${t.name}:${d}`, password: cred.secret }],
      ['no_credential', { username: as(d) }],
      ['wrong', { username: as(d), password: cred.secret.slice(1) + 'x' }],
      ['wrong', { username: as(d), password: expiring.secret }],
    ];
    for (const [reason, opts] of cases) {
      expect({ reason, code: await connackCode(url, opts) }).toEqual({ reason, code: 4 });
      expect({ reason, code: await connackCode(url, { ...opts, protocolVersion: 5 }) }).toEqual({ reason, code: 0x86 });
    }
    await new Promise((r) => setTimeout(r, Math.max(0, Date.parse(expiring.expires_at!) - Date.now()) + 100));
    expect(await connackCode(url, { username: as(bare), password: expiring.secret })).toBe(4);
    // A device whose only credential expired has credentials: an empty password is "no credential".
    await deleteCredential(svc, t, bare, expiring.id);
    expect(await connackCode(url, { username: as(bare) })).toBe(4);
    const after = await counts();
    const added = Object.fromEntries(reasons.map((r, i) => [r, after[i]! - before[i]!]));
    expect(added).toEqual({ unknown_device: 4, no_credential: 3, wrong: 4, expired: 1 });
  });

  it('an MQTT 5 client with a valid login is told the embedded broker speaks MQTT 3.1.1 (0x84): not counted as accepted, not a use of the credential', async () => {
    const d = await newDevice(svc, t);
    const cred = await newCredential(svc, t, d);
    const accepted = () => metricValue(svc, 'device_logins_accepted_total{credential="password"}');
    const lastUsed = async () =>
      (await http<CredentialView[]>('GET', `${svc.base}/device/${d}/credentials`, { token: t.token })).body[0]!.last_used_at;
    const before = await accepted();
    expect(await connackCode(url, { username: as(d), password: cred.secret, protocolVersion: 5 })).toBe(0x84);
    // Uses are written every 2 s: wait past one write.
    await new Promise((r) => setTimeout(r, 2500));
    expect(await accepted()).toBe(before);
    expect(await lastUsed()).toBeNull();
    // The same login in MQTT 3.1.1 is both.
    const c = await connect(url, { username: as(d), password: cred.secret });
    await c.endAsync();
    expect(await accepted()).toBe(before + 1);
    await eventually(async () => (await lastUsed()) ?? undefined, 'last_used_at');
  });

  it('a client-chosen secret logs in (salted slow hash), again and again', async () => {
    const d = await newDevice(svc, t);
    await newCredential(svc, t, d, { type: 'password', secret: 'a-secret-i-chose-42' });
    for (let i = 0; i < 3; i++) expect(await connackCode(url, { username: as(d), password: 'a-secret-i-chose-42' })).toBe(0);
    expect(await connackCode(url, { username: as(d), password: 'a-secret-i-chose-43' })).toBe(4);
  });

  it('only the secret itself logs in: not with NUL bytes after it (scrypt keys its HMAC with the password, zero-padded), nor other bytes no secret can hold', async () => {
    const d = await newDevice(svc, t);
    await newCredential(svc, t, d, { type: 'password', secret: 'a-secret-i-chose-42' });
    const generated = (await newCredential(svc, t, d)).secret;
    for (const password of [
      'a-secret-i-chose-42\u0000',
      'a-secret-i-chose-42\u0000\u0000\u0000',
      `${generated}\u0000`,
      'a-secret-i-chose-42 ',
      'a-secret-i-chose-42\u00e9',
    ])
      expect({ password, code: await connackCode(url, { username: as(d), password }) }).toEqual({ password, code: 4 });
    expect(await connackCode(url, { username: as(d), password: 'a-secret-i-chose-42' })).toBe(0);
    expect(await connackCode(url, { username: as(d), password: generated })).toBe(0);
  });

  it('rotation: two credentials log in at once; deleting one closes the connections that used it within a second, not the others', async () => {
    const d = await newDevice(svc, t);
    const old = await newCredential(svc, t, d);
    const next = await newCredential(svc, t, d);
    const withOld = await connect(url, { username: as(d), password: old.secret });
    const withNext = await connect(url, { username: as(d), password: next.secret });
    const closed = closedByPeer(withOld);
    const started = Date.now();
    expect((await deleteCredential(svc, t, d, old.id)).status).toBe(200);
    await closed;
    expect(Date.now() - started).toBeLessThan(1000);
    expect(withNext.connected).toBe(true);
    await withNext.publishAsync(`${as(d)}/attrs`, JSON.stringify({ temperature: 1 }), { qos: 1 });
    expect(await connackCode(url, { username: as(d), password: old.secret })).toBe(4);
    expect(await connackCode(url, { username: as(d), password: next.secret })).toBe(0);
    withOld.end(true);
    await withNext.endAsync();
  });

  it('a login checked while its credential is deleted does not outlive it (found by an audit)', async () => {
    // A client-chosen secret costs a slow hash: a deletion committed meanwhile closed nothing
    // (the client was not bound yet), and the connection then lasted with the deleted credential.
    const d = await newDevice(svc, t);
    const accepted = 'device_logins_accepted_total{credential="password"}';
    for (let i = 0; i < 5; i++) {
      const secret = `a-secret-i-chose-${i}-${Date.now()}`;
      const cred = await newCredential(svc, t, d, { type: 'password', secret });
      const before = await metricValue(svc, accepted);
      const login = connect(url, { username: as(d), password: secret }).then(
        (c) => c,
        () => undefined,
      );
      await new Promise((r) => setTimeout(r, 5 + 10 * i));
      expect((await deleteCredential(svc, t, d, cred.id)).status).toBe(200);
      const c = await login;
      // A login refused, even one refused because its credential went while it was checked, is
      // not counted as accepted (found by an audit: it was, and not as refused).
      if (!c) {
        expect({ attempt: i, accepted: (await metricValue(svc, accepted)) - before }).toEqual({ attempt: i, accepted: 0 });
        continue; // refused: the deletion came first
      }
      await new Promise((r) => setTimeout(r, 1000));
      expect({ attempt: i, connected: c.connected }).toEqual({ attempt: i, connected: false });
      c.end(true);
    }
  });

  it('a connection ends when the credential it logged in with expires', async () => {
    const d = await newDevice(svc, t);
    const cred = await newCredential(svc, t, d, { type: 'password', expires_at: new Date(Date.now() + 1500).toISOString() });
    const c = await connect(url, { username: as(d), password: cred.secret });
    await closedByPeer(c, 10_000);
    c.end(true);
    expect(await connackCode(url, { username: as(d), password: cred.secret })).toBe(4);
  });

  it('removing the device closes its connections; its credentials are gone with it', async () => {
    const d = await newDevice(svc, t);
    const cred = await newCredential(svc, t, d);
    const c = await connect(url, { username: as(d), password: cred.secret });
    const closed = closedByPeer(c);
    expect((await http('DELETE', `${svc.base}/device/${d}`, { token: t.token })).status).toBe(200);
    await closed;
    c.end(true);
    expect(await connackCode(url, { username: as(d), password: cred.secret })).toBe(4);
  });

  describe('legacy layouts, with the credentials of the device they name', () => {
    // MQTT 3.1.1 carries a password only beside a username: a client that names itself by its
    // client id, or not at all, sends an empty one.
    it('client id <tenant>:<id> and a password: its legacy topic', async () => {
      const d = await newDevice(svc, t);
      const cred = await newCredential(svc, t, d);
      expect(await connackCode(url, { clientId: as(d) })).toBe(4);
      expect(await connackCode(url, { clientId: as(d), password: 'wrong-password-xyz', username: '' })).toBe(4);
      const c = await connect(url, { clientId: as(d), username: '', password: cred.secret });
      await c.publishAsync(`/${t.name}/${d}/attrs`, JSON.stringify({ temperature: 7 }), { qos: 1 });
      expect(await historyCount(svc.service.pool, t.name, d)).toBe(1);
      await c.endAsync();
    });

    it('no name at CONNECT: the first legacy topic names the device and the password is checked for it', async () => {
      const d = await newDevice(svc, t);
      const cred = await newCredential(svc, t, d);
      // Nothing to check a login against: refused at once.
      expect(await connackCode(url, {})).toBe(4);
      const good = await connect(url, { username: '', password: cred.secret });
      await good.publishAsync(`/${t.name}/${d}/attrs`, JSON.stringify({ temperature: 8 }), { qos: 1 });
      expect(await historyCount(svc.service.pool, t.name, d)).toBe(1);
      await good.endAsync();
      const bad = await connect(url, { username: '', password: 'not-the-secret-at-all' });
      const closed = closedByPeer(bad);
      bad.publish(`/${t.name}/${d}/attrs`, JSON.stringify({ temperature: 9 }), { qos: 1 });
      await closed;
      bad.end(true);
      expect(await historyCount(svc.service.pool, t.name, d)).toBe(1);
    });
  });
});

describe('MQTT_DEVICE_AUTH=optional (the embedded database default)', () => {
  const svc = useService({ MQTT_URL: undefined, MQTT_DEVICE_AUTH: 'optional' });
  let t: Tenant;
  let url: string;

  beforeAll(async () => {
    url = `mqtt://127.0.0.1:${svc.service.mqttPort}`;
    t = await newTenant(svc);
  });

  const as = (device: string) => `${t.name}:${device}`;

  it('a device without credentials connects as before; an unknown one is a refused login: "bad user name or password" (4; MQTT 5 0x86)', async () => {
    const d = await newDevice(svc, t);
    expect(await connackCode(url, { username: as(d) })).toBe(0);
    expect(await connackCode(url, { username: as('ffffff') })).toBe(4);
    expect(await connackCode(url, { username: as('ffffff'), protocolVersion: 5 })).toBe(0x86);
  });

  it('a device with a credential must present it', async () => {
    const d = await newDevice(svc, t);
    const cred = await newCredential(svc, t, d);
    expect(await connackCode(url, { username: as(d) })).toBe(4);
    expect(await connackCode(url, { username: as(d), password: 'wrong-password-here' })).toBe(4);
    expect(await connackCode(url, { username: as(d), password: cred.secret })).toBe(0);
    // And once all are gone, it connects as before.
    await deleteCredential(svc, t, d, cred.id);
    expect(await connackCode(url, { username: as(d) })).toBe(0);
  });

  it("a device's first credential closes the connections it had without one", async () => {
    const d = await newDevice(svc, t);
    const c = await connect(url, { username: as(d) });
    const closed = closedByPeer(c);
    const cred = await newCredential(svc, t, d);
    await closed;
    c.end(true);
    const again = await connect(url, { username: as(d), password: cred.secret });
    // A second credential does not close connections that logged in with the first.
    await newCredential(svc, t, d);
    await again.publishAsync(`${as(d)}/attrs`, JSON.stringify({ temperature: 3 }), { qos: 1 });
    await again.endAsync();
  });

  // The contract's logins (a username naming a device that exists) are not guesses: failures
  // of names that had no device, from any address, never slow a device without credentials.
  it('a device without credentials is not slowed by failed logins: of its own name before it existed, or of other names from its address', async () => {
    const id = Math.floor(0x100000 + Math.random() * 0xefffff).toString(16);
    for (let i = 0; i < 6; i++) expect(await connackCode(url, { username: as(id) })).toBe(4);
    for (let i = 0; i < 35; i++) expect(await connackCode(url, { username: as(`e${i.toString(16).padStart(4, '0')}`) })).toBe(4);
    const created = await http('POST', `${svc.base}/device`, { token: t.token, body: { label: 'late', templates: [t.templateId], id } });
    expect(created.status).toBe(200);
    const started = Date.now();
    expect(await connackCode(url, { username: as(id) })).toBe(0);
    // A throttled login would wait 4 s here (6 failures of its name) and 8 s (35 of its address).
    expect(Date.now() - started).toBeLessThan(2000);
  });
});

describe('MQTT_DEVICE_AUTH=off: as before, credentials are not asked for', () => {
  const svc = useService({ MQTT_URL: undefined, MQTT_DEVICE_AUTH: 'off' });
  let t: Tenant;
  let url: string;

  beforeAll(async () => {
    url = `mqtt://127.0.0.1:${svc.service.mqttPort}`;
    t = await newTenant(svc);
  });

  it('a device with a credential connects without it, or with anything; an unknown one is "not authorised" (5) as before', async () => {
    const d = await newDevice(svc, t);
    await newCredential(svc, t, d);
    expect(await connackCode(url, { username: `${t.name}:${d}` })).toBe(0);
    expect(await connackCode(url, { username: `${t.name}:${d}`, password: 'anything' })).toBe(0);
    expect(await connackCode(url, { username: `${t.name}:ffffff` })).toBe(5);
  });
});

describe('a login checked after a deletion (found by an audit)', () => {
  // A lookup of the device's credentials under way when the deletion was announced was shared
  // with the logins that came after it: read before the deletion committed, it let the deleted
  // credential in (for every broker: the embedded one, whose connection then lasted, and the hooks).
  it('is not answered by a lookup that started before it', async () => {
    const hasher = new CredentialHasher(crypto.randomBytes(32));
    const place = { tenant: 'acme', deviceId: 'a1b2c3', credentialId: crypto.randomUUID() };
    const secret = 'Zq3xV9kR2mT7wY4bN8cL1dF6gH0jK5pS';
    const row = { tenant: 'acme', device_id: 'a1b2c3', id: place.credentialId, secret_hash: hasher.keyed(place, secret), expires_ms: null };
    const answers: Array<(rows: unknown[]) => void> = [];
    let held = true; // the lookups wait for the test's answers; after it, every query is answered at once
    // A stub of the one pg.Pool method DeviceLogins calls here (query), hence the cast.
    const pool = {
      query: () =>
        held ? new Promise((resolve) => answers.push((rows) => resolve({ rows }))) : Promise.resolve({ rows: [], rowCount: 0 }),
    } as unknown as pg.Pool;
    const logins = new DeviceLogins({
      pool,
      hasher,
      mode: 'required',
      metrics: new LoginMetrics(createMetrics()),
      log: createLogger('silent'),
      maxAgeMs: 60_000,
    });
    try {
      const login = { device: { tenant: 'acme', id: 'a1b2c3' }, password: Buffer.from(secret), address: '10.0.0.1' };
      const before = logins.check(login);
      await eventually(() => (answers.length === 1 ? true : undefined), 'the first lookup');
      logins.invalidate({ type: 'credentials.changed', tenant: 'acme', deviceId: 'a1b2c3', removedIds: [place.credentialId] });
      const after = logins.check(login);
      await new Promise((r) => setTimeout(r, 50));
      answers[0]!([row]); // read before the deletion committed
      expect((await before).ok).toBe(true);
      expect(answers).toHaveLength(2); // the later login looked again
      answers[1]!([{ ...row, id: null, secret_hash: null }]); // the device, without the credential
      expect(await after).toEqual({ ok: false, reason: 'no_credential' });
    } finally {
      held = false;
      for (const answer of answers) answer([]);
      await logins.stop();
    }
  });
});
