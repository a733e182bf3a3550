// External brokers' authentication and authorisation calls on the internal listener
// (docs/operations.md §2): EMQX 5's HTTP authenticator and authorizer, VerneMQ's webhooks, in
// their own formats. No EMQX or VerneMQ runs here: the calls are made as those brokers document
// them. The login rules are the embedded broker's (MQTT_DEVICE_AUTH=required here), the topic
// rules the same module's.
import { beforeAll, describe, expect, it } from 'vitest';
import { readRepoFile } from '../deploy/files.js';
import { http, useService } from '../helpers/service.js';
import { MAX_DELAY_MS } from '../../src/registry/credentials/throttle.js';
import { metricValue, newCredential, newDevice, newTenant, type Tenant } from './fixtures.js';

const svc = useService({ MQTT_DEVICE_AUTH: 'required' });
let t: Tenant;
let other: Tenant;

beforeAll(async () => {
  t = await newTenant(svc);
  other = await newTenant(svc);
});

const emqx = async (hook: 'authenticate' | 'authorize', body: object) =>
  (await http('POST', `${svc.internal}/broker/emqx/${hook}`, { body })).body;
/** A VerneMQ webhook call: `hook` as the vernemq-hook header names it, sent to the endpoint registered for it. */
const verne = async (hook: string, body: object, endpoint = hook) => {
  const res = await http('POST', `${svc.internal}/broker/vernemq/${endpoint}`, {
    body,
    headers: { 'vernemq-hook': hook, 'content-type': 'application/json' },
  });
  return res.body;
};

describe('EMQX HTTP authenticator', () => {
  it('a device with its password: allow; wrong, none, unknown device: deny; counted like embedded logins', async () => {
    const d = await newDevice(svc, t);
    const cred = await newCredential(svc, t, d);
    const before = await metricValue(svc, 'device_logins_refused_total{reason="wrong"}');
    const username = `${t.name}:${d}`;
    expect(await emqx('authenticate', { clientid: 'c1', username, password: cred.secret, peerhost: '10.1.0.1' })).toEqual({
      result: 'allow',
      is_superuser: false,
    });
    expect(await emqx('authenticate', { clientid: 'c1', username, password: 'wrong-password-1', peerhost: '10.1.0.1' })).toEqual({
      result: 'deny',
    });
    expect(await emqx('authenticate', { clientid: 'c1', username, password: '', peerhost: '10.1.0.1' })).toEqual({ result: 'deny' });
    expect(
      await emqx('authenticate', { clientid: 'c1', username: `${t.name}:ffffff`, password: cred.secret, peerhost: '10.1.0.1' }),
    ).toEqual({ result: 'deny' });
    // Another tenant's device name with this device's secret.
    expect(
      await emqx('authenticate', { clientid: 'c1', username: `${other.name}:${d}`, password: cred.secret, peerhost: '10.1.0.1' }),
    ).toEqual({ result: 'deny' });
    expect(await metricValue(svc, 'device_logins_refused_total{reason="wrong"}')).toBe(before + 1);
  });

  it('a body without a username is 400 naming that key, the one it needs; the other keys may be left out', async () => {
    const res = await http<{ message: string; status: number }>('POST', `${svc.internal}/broker/emqx/authenticate`, {
      body: { clientid: 'c1', password: 'x', peerhost: '10.1.0.9' },
    });
    expect([res.status, res.body.status]).toEqual([400, 400]);
    expect(res.body.message).toContain('username');
    // The message said clientid, password and peerhost were needed too: a body with only a username is answered.
    expect(res.body.message).not.toMatch(/with clientid, username, password and peerhost/);
    expect(await emqx('authenticate', { username: `${t.name}:ffffff` })).toEqual({ result: 'deny' });
  });

  it('an expiring credential tells EMQX when to end the session (expire_at, Unix seconds)', async () => {
    const d = await newDevice(svc, t);
    const cred = await newCredential(svc, t, d, { type: 'password', expires_at: '2099-01-01T00:00:00Z' });
    expect(await emqx('authenticate', { username: `${t.name}:${d}`, password: cred.secret, peerhost: '10.1.0.2' })).toEqual({
      result: 'allow',
      is_superuser: false,
      expire_at: Date.parse('2099-01-01T00:00:00Z') / 1000,
    });
  });

  it('a client certificate EMQX verified (cert_common_name) logs its device in; a username must name the same device', async () => {
    const d = await newDevice(svc, t);
    const e = await newDevice(svc, t);
    expect(
      await emqx('authenticate', { clientid: 'c2', username: '', password: '', peerhost: '10.1.0.3', cert_common_name: `${t.name}:${d}` }),
    ).toEqual({ result: 'allow', is_superuser: false });
    expect(
      await emqx('authenticate', {
        clientid: 'c2',
        username: `${t.name}:${e}`,
        password: '',
        peerhost: '10.1.0.3',
        cert_common_name: `${t.name}:${d}`,
      }),
    ).toEqual({ result: 'deny' });
  });

  it('a client id naming another device is refused (it would take over that device’s session), as on the embedded broker', async () => {
    const d = await newDevice(svc, t);
    const theirs = await newDevice(svc, other);
    const cred = await newCredential(svc, t, d);
    const login = (clientid: string, extra: object = {}) =>
      emqx('authenticate', { clientid, username: `${t.name}:${d}`, password: cred.secret, peerhost: '10.1.0.9', ...extra });
    expect(await login(`${t.name}:${d}`)).toEqual({ result: 'allow', is_superuser: false });
    expect(await login(`${other.name}:${theirs}`)).toEqual({ result: 'deny' });
    expect(await login(`${t.name}:${theirs}`)).toEqual({ result: 'deny' });
    // By certificate alone.
    expect(
      await emqx('authenticate', {
        clientid: `${other.name}:${theirs}`,
        username: '',
        password: '',
        peerhost: '10.1.0.9',
        cert_common_name: `${t.name}:${d}`,
      }),
    ).toEqual({ result: 'deny' });
    const reg = (client_id: string) =>
      verne('auth_on_register', {
        peer_addr: '10.2.0.9',
        peer_port: 1,
        username: `${t.name}:${d}`,
        password: cred.secret,
        mountpoint: '',
        client_id,
        clean_session: false,
      });
    expect(await reg(`${t.name}:${d}`)).toEqual({ result: 'ok' });
    expect(await reg(`${other.name}:${theirs}`)).toEqual({ result: { error: 'not_allowed' } });
  });

  it('a username naming no device is left to the next authenticator (the service account), even with a device certificate', async () => {
    const d = await newDevice(svc, t);
    expect(
      await emqx('authenticate', {
        clientid: 'device-registry-ingest-0',
        username: 'device-registry',
        password: 'x',
        peerhost: '10.1.0.4',
      }),
    ).toEqual({ result: 'ignore' });
    expect(
      await emqx('authenticate', {
        clientid: 'c3',
        username: 'device-registry',
        password: '',
        peerhost: '10.1.0.4',
        cert_common_name: `${t.name}:${d}`,
      }),
    ).toEqual({ result: 'ignore' });
  });

  it('failures from one peerhost are throttled: its next login waits', async () => {
    const d = await newDevice(svc, t);
    const cred = await newCredential(svc, t, d);
    const username = `${t.name}:${d}`;
    for (let i = 0; i < 3; i++)
      expect(await emqx('authenticate', { username, password: `guess-${i}`, peerhost: '10.1.0.5' })).toEqual({ result: 'deny' });
    const started = Date.now();
    expect(await emqx('authenticate', { username, password: cred.secret, peerhost: '10.1.0.5' })).toEqual({
      result: 'allow',
      is_superuser: false,
    });
    expect(Date.now() - started).toBeGreaterThanOrEqual(450);
  });

  it('a name flooded with guesses from elsewhere: the device still gets in, at most 8 s late', async () => {
    const d = await newDevice(svc, t);
    const cred = await newCredential(svc, t, d);
    const username = `${t.name}:${d}`;
    for (let i = 0; i < 3; i++)
      expect(await emqx('authenticate', { username, password: `guess-${i}`, peerhost: '10.2.0.1' })).toEqual({ result: 'deny' });
    // 20 guesses at once from one address: 16 wait, the rest are refused unchecked.
    const flood = Array.from({ length: 20 }, (_, i) => emqx('authenticate', { username, password: `flood-${i}`, peerhost: '10.2.0.1' }));
    await new Promise((r) => setTimeout(r, 200));
    const started = Date.now();
    expect(await emqx('authenticate', { username, password: cred.secret, peerhost: '10.2.0.2' })).toEqual({
      result: 'allow',
      is_superuser: false,
    });
    expect(Date.now() - started).toBeLessThan(8_500);
    expect(await Promise.all(flood)).toEqual(Array.from({ length: 20 }, () => ({ result: 'deny' })));
  }, 30_000);

  it('the documented EMQX configuration waits for an answer longer than the longest throttle wait (else a flooded device is refused, not late)', () => {
    // EMQX takes an authenticator that did not answer within request_timeout as `ignore`: the
    // next one (the built-in database) does not know the device, and its login is refused.
    const operations = readRepoFile('docs/operations.md');
    const emqxConf = operations.slice(
      operations.indexOf('### Clustered broker: EMQX'),
      operations.indexOf('### Clustered broker: VerneMQ'),
    );
    const authenticator = emqxConf.slice(emqxConf.indexOf('/broker/emqx/authenticate'), emqxConf.indexOf('built_in_database'));
    const timeout = /request_timeout = (\d+)s/.exec(authenticator);
    expect(timeout, 'request_timeout of the HTTP authenticator').not.toBeNull();
    expect(Number(timeout![1]) * 1000).toBeGreaterThanOrEqual(MAX_DELAY_MS + 2000);
  });
});

describe('EMQX HTTP authorizer', () => {
  it('a device publishes to its attrs topic and subscribes to its config topic, in both layouts; nothing of other devices or tenants', async () => {
    const d = await newDevice(svc, t);
    const e = await newDevice(svc, t);
    const username = `${t.name}:${d}`;
    const cases: Array<[string, string, string]> = [
      [`${t.name}:${d}/attrs`, 'publish', 'allow'],
      [`/${t.name}/${d}/attrs`, 'publish', 'allow'],
      [`${t.name}:${d}/config`, 'subscribe', 'allow'],
      [`/${t.name}/${d}/config`, 'subscribe', 'allow'],
      [`${t.name}:${d}/config`, 'publish', 'deny'],
      [`${t.name}:${d}/attrs`, 'subscribe', 'deny'],
      [`${t.name}:${e}/attrs`, 'publish', 'deny'],
      [`${other.name}:${d}/attrs`, 'publish', 'deny'],
      [`/${other.name}/${d}/attrs`, 'publish', 'deny'],
      ['+/attrs', 'subscribe', 'deny'],
      ['#', 'subscribe', 'deny'],
      [`${t.name}:${d}/attrs`, 'all', 'deny'],
    ];
    for (const [topic, action, result] of cases) {
      expect({ topic, action, answer: await emqx('authorize', { clientid: 'c', username, topic, action }) }).toEqual({
        topic,
        action,
        answer: { result },
      });
    }
    // Legacy: named by its client id.
    expect(await emqx('authorize', { clientid: username, username: '', topic: `/${t.name}/${d}/attrs`, action: 'publish' })).toEqual({
      result: 'allow',
    });
  });

  it('a device logged in by client certificate alone (cert_common_name, in the documented body) is its CN’s device', async () => {
    const d = await newDevice(svc, t);
    const cn = `${t.name}:${d}`;
    const ask = (topic: string, action: string, more: object = {}) =>
      emqx('authorize', { clientid: 'c', username: '', topic, action, cert_common_name: cn, ...more });
    expect(await ask(`${cn}/attrs`, 'publish')).toEqual({ result: 'allow' });
    expect(await ask(`${cn}/config`, 'subscribe')).toEqual({ result: 'allow' });
    expect(await ask(`${other.name}:${d}/attrs`, 'publish')).toEqual({ result: 'deny' });
    // A username naming another device than the certificate: refused at login, denied here too.
    expect(await ask(`${t.name}:x${d}/attrs`, 'publish', { username: `${t.name}:x${d}` })).toEqual({ result: 'deny' });
    // Without a certificate (EMQX sends the placeholder empty), a client naming no device is not the service's to decide.
    expect(await ask(`${cn}/attrs`, 'publish', { cert_common_name: '' })).toEqual({ result: 'ignore' });
  });
});

describe('VerneMQ webhooks', () => {
  it('auth_on_register: ok with the password, not_allowed without; next for a client naming no device', async () => {
    const d = await newDevice(svc, t);
    const cred = await newCredential(svc, t, d);
    const reg = (username: string | null, password: string | null, client_id = 'c') =>
      verne('auth_on_register', {
        peer_addr: '10.2.0.1',
        peer_port: 1,
        username,
        password,
        mountpoint: '',
        client_id,
        clean_session: true,
      });
    expect(await reg(`${t.name}:${d}`, cred.secret)).toEqual({ result: 'ok' });
    expect(await reg(`${t.name}:${d}`, 'wrong-password-2')).toEqual({ result: { error: 'not_allowed' } });
    expect(await reg(`${t.name}:${d}`, null)).toEqual({ result: { error: 'not_allowed' } });
    // Legacy: no username, the client id names the device.
    expect(await reg(null, cred.secret, `${t.name}:${d}`)).toEqual({ result: 'ok' });
    expect(await reg('device-registry', 'x', 'device-registry-ingest-1')).toEqual({ result: 'next' });
  });

  it('auth_on_publish and auth_on_subscribe: the topic rules', async () => {
    const d = await newDevice(svc, t);
    const username = `${t.name}:${d}`;
    const pub = (topic: string) =>
      verne('auth_on_publish', { username, client_id: 'c', mountpoint: '', qos: 1, topic, payload: 'e30=', retain: false });
    expect(await pub(`${username}/attrs`)).toEqual({ result: 'ok' });
    expect(await pub(`/${t.name}/${d}/attrs`)).toEqual({ result: 'ok' });
    expect(await pub(`${other.name}:${d}/attrs`)).toEqual({ result: { error: 'not_allowed' } });
    const sub = (topics: Array<{ topic: string; qos: number }>) =>
      verne('auth_on_subscribe', { username, client_id: 'c', mountpoint: '', topics });
    expect(await sub([{ topic: `${username}/config`, qos: 1 }])).toEqual({ result: 'ok' });
    expect(
      await sub([
        { topic: `${username}/config`, qos: 1 },
        { topic: `${other.name}:${d}/config`, qos: 1 },
      ]),
    ).toEqual({
      result: 'ok',
      topics: [
        { topic: `${username}/config`, qos: 1 },
        { topic: `${other.name}:${d}/config`, qos: 128 },
      ],
      modifiers: {
        topics: [
          { topic: `${username}/config`, qos: 1 },
          { topic: `${other.name}:${d}/config`, qos: 135 },
        ],
      },
    });
    expect(await sub([{ topic: '#', qos: 0 }])).toEqual({ result: { error: 'not_allowed' } });
    expect(
      await verne('auth_on_publish', {
        username: 'device-registry',
        client_id: 'device-registry-actuation',
        mountpoint: '',
        qos: 1,
        topic: `${username}/config`,
        payload: '',
        retain: false,
      }),
    ).toEqual({
      result: 'next',
    });
  });
  it('auth_on_subscribe registered for MQTT 5 clients too (auth_on_subscribe_m5): a refused topic is refused in the form that hook reads', async () => {
    // VerneMQ reads an auth_on_subscribe_m5 answer's topics from `modifiers` only (reason code
    // 135, Not authorized); `{"result": "ok"}` without them grants every topic, `#` included.
    const d = await newDevice(svc, t);
    const username = `${t.name}:${d}`;
    const own = { topic: `${username}/config`, qos: 1, no_local: false, rap: false, retain_handling: 'send_retain' };
    const all = { topic: '#', qos: 0, no_local: false, rap: false, retain_handling: 'send_retain' };
    const answer = await verne(
      'auth_on_subscribe_m5',
      { username, client_id: 'c', mountpoint: '', topics: [own, all], properties: {} },
      'auth_on_subscribe',
    );
    expect(answer).toMatchObject({
      result: 'ok',
      modifiers: { topics: [own, { topic: '#', qos: 135 }] },
    });
    // The same answer, read by auth_on_subscribe (MQTT 3.1.1): its top-level topics.
    expect(answer).toMatchObject({
      topics: [
        { topic: own.topic, qos: 1 },
        { topic: '#', qos: 128 },
      ],
    });
    expect(
      await verne('auth_on_subscribe_m5', { username, client_id: 'c', mountpoint: '', topics: [own], properties: {} }, 'auth_on_subscribe'),
    ).toEqual({
      result: 'ok',
    });
    expect(
      await verne('auth_on_subscribe_m5', { username, client_id: 'c', mountpoint: '', topics: [all], properties: {} }, 'auth_on_subscribe'),
    ).toEqual({
      result: { error: 'not_allowed' },
    });
  });
});

describe('where they are served', () => {
  it('the internal listener only, without a token', async () => {
    const res = await http('POST', `${svc.base}/broker/emqx/authenticate`, { body: { username: 'x' } });
    expect(res.status).toBe(401);
    expect((await http('POST', `${svc.internal}/broker/emqx/authenticate`, { body: { username: 'x' } })).status).toBe(200);
  });
});

describe('a body nested thousands of levels deep', () => {
  it('is 400 on every hook, as any body that is not theirs (was a 500: the error message showed the value)', async () => {
    const deep = `${'['.repeat(20_000)}1${']'.repeat(20_000)}`;
    const hooks = [
      ['emqx/authenticate', `{"clientid":"c","username":${deep}}`],
      ['emqx/authorize', `{"clientid":"c","username":"a:b","topic":${deep},"action":"publish"}`],
      ['vernemq/auth_on_register', `{"client_id":${deep}}`],
      ['vernemq/auth_on_publish', deep],
      ['vernemq/auth_on_subscribe', `{"client_id":"c","topics":${deep}}`],
    ];
    for (const [hook, rawBody] of hooks) {
      const res = await http('POST', `${svc.internal}/broker/${hook}`, {
        rawBody,
        headers: { 'content-type': 'application/json', 'vernemq-hook': hook!.split('/')[1]! },
      });
      expect({ hook, status: res.status }).toEqual({ hook, status: 400 });
      expect(typeof (res.body as { message?: unknown }).message).toBe('string');
    }
    const d = await newDevice(svc, t);
    const res = await http<{ status: number }>('POST', `${svc.base}/device/${d}/credentials`, {
      token: t.token,
      rawBody: `{"type":${deep}}`,
      headers: { 'content-type': 'application/json' },
    });
    expect([res.status, res.body.status]).toEqual([400, 400]);
  });
});
