// A database reached by its Unix socket (DATABASE_URL `?host=/var/run/postgresql`, the usual
// local setup) that stops: PostgreSQL removes its socket file, so connecting fails ENOENT, not
// ECONNREFUSED. The credential routes and the broker hooks answer 503 "Database unavailable"
// then, as for a database down behind TCP (docs/api.md, "Errors"): the client or broker may
// retry; it was a 500 "Internal Error", logged as a bug (found by an audit).
import fs from 'node:fs/promises';
import net from 'node:net';
import path from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { http, login, startTestService, tempDir, testEnv, type TestService } from '../helpers/service.js';
import { newCredential, newDevice, newTenant, type Tenant } from './fixtures.js';

let svc: TestService & { token: string };
let proxy: net.Server;
const proxied = new Set<net.Socket>();
let t: Tenant;
let device: string;
let secret: string;

beforeAll(async () => {
  const env = await testEnv();
  const target = new URL(env.DATABASE_URL!);
  // A Unix socket in front of the test database, as PostgreSQL's own would be.
  const dir = await tempDir('dr-socket-');
  proxy = net.createServer((client) => {
    const server = net.connect(Number(target.port || 5432), target.hostname);
    for (const s of [client, server]) {
      proxied.add(s);
      s.on('close', () => proxied.delete(s));
      s.on('error', () => undefined);
    }
    client.pipe(server).pipe(client);
  });
  await new Promise<void>((resolve) => proxy.listen(path.join(dir, '.s.PGSQL.5432'), resolve));
  const url = new URL(target);
  url.hostname = 'localhost';
  url.port = '';
  url.searchParams.set('host', dir);
  const started = await startTestService({ ...env, DATABASE_URL: url.toString(), MQTT_DEVICE_AUTH: 'required' });
  svc = Object.assign(started, { token: await login(started.base) });
  t = await newTenant(svc);
  device = await newDevice(svc, t);
  secret = (await newCredential(svc, t, device)).secret;
  // The database stops: its socket file goes, and with it every connection.
  await new Promise<void>((resolve) => {
    proxy.close(() => resolve());
    for (const s of proxied) s.destroy();
  });
  await expect(fs.access(path.join(dir, '.s.PGSQL.5432'))).rejects.toThrow();
});

afterAll(async () => {
  await svc?.stop();
});

const UNAVAILABLE = { message: 'Database unavailable', status: 503 };

it('the credential routes answer 503 "Database unavailable", not 500', async () => {
  const list = await http('GET', `${svc.base}/device/${device}/credentials`, { token: t.token });
  expect({ status: list.status, body: list.body }).toEqual({ status: 503, body: UNAVAILABLE });
  const create = await http('POST', `${svc.base}/device/${device}/credentials`, { token: t.token, body: { type: 'password' } });
  expect({ status: create.status, body: create.body }).toEqual({ status: 503, body: UNAVAILABLE });
});

it('the broker hooks answer 503 for a device they cannot look up, not 500', async () => {
  const username = `${t.name}:${device}`;
  const emqx = await http('POST', `${svc.internal}/broker/emqx/authenticate`, {
    body: { clientid: 'c', username, password: secret, peerhost: '10.0.0.1' },
  });
  expect({ status: emqx.status, body: emqx.body }).toEqual({ status: 503, body: UNAVAILABLE });
  const verne = await http('POST', `${svc.internal}/broker/vernemq/auth_on_register`, {
    body: { peer_addr: '10.0.0.1', peer_port: 1, username, password: secret, mountpoint: '', client_id: 'c', clean_session: true },
  });
  expect({ status: verne.status, body: verne.body }).toEqual({ status: 503, body: UNAVAILABLE });
});
