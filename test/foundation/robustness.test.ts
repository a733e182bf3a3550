// Robustness of the foundation as a user sees it: which tokens are refused (and with which body),
// that logs never carry secrets, that SIGTERM lets in-flight requests finish, and the log format.
import crypto from 'node:crypto';
import fs from 'node:fs/promises';
import nodeHttp from 'node:http';
import path from 'node:path';
import pg from 'pg';
import { SignJWT, UnsecuredJWT } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../../src/net.js';
import {
  http,
  login,
  loggedAddress,
  spawnService,
  startTestService,
  tempDir,
  testEnv,
  type SpawnedService,
  type TestService,
} from '../helpers/service.js';
import { timescaleLayout } from '../helpers/history-layout.js';

const spawned: SpawnedService[] = [];
afterAll(() => {
  for (const s of spawned) if (s.child.exitCode === null && s.child.signalCode === null) s.child.kill('SIGKILL');
});

/** Spawns `node dist/src/main.js` with `env`, waits until it is ready; the public and internal base URLs. */
async function spawnReady(env: Record<string, string | undefined>, readyMs = 60_000) {
  const svc = spawnService(env);
  spawned.push(svc);
  await svc.waitFor(/"msg":"ready"/, readyMs);
  const base = loggedAddress(await svc.waitFor(/public HTTP API listening/));
  const internal = loggedAddress(await svc.waitFor(/internal HTTP API listening/));
  return { svc, base, internal };
}

/** Zero-setup environment: embedded PostgreSQL under a fresh DATA_DIR and the embedded broker, free ports. */
async function zeroSetupEnv(extra: Record<string, string> = {}): Promise<Record<string, string>> {
  return { DATA_DIR: await tempDir(), PORT: '0', INTERNAL_PORT: '0', HOST: '127.0.0.1', MQTT_PORT: '0', MQTT_HOST: '127.0.0.1', ...extra };
}

/** SIGTERM, then the exit code and how long the process took to exit. */
async function terminate(svc: SpawnedService): Promise<{ code: number | null; ms: number }> {
  const t0 = Date.now();
  svc.child.kill('SIGTERM');
  const code = await svc.exited;
  return { code, ms: Date.now() - t0 };
}

// ---------------------------------------------------------------------------------------------
// 1. Token validation
// ---------------------------------------------------------------------------------------------

describe('token validation (JWT_SECRET set: tokens forged with the service key)', () => {
  const SECRET = `robustness-${crypto.randomBytes(16).toString('hex')}`;
  const key = new TextEncoder().encode(SECRET);
  const invalid = { message: 'Invalid authentication token', status: 401 };
  let svc: TestService;
  let issuer: string;
  let claims: Record<string, unknown>;

  beforeAll(async () => {
    svc = await startTestService({ JWT_SECRET: SECRET });
    // The claims of a token the service issued itself: the forged ones start from these.
    const jwt = await login(svc.base);
    claims = JSON.parse(Buffer.from(jwt.split('.')[1]!, 'base64url').toString());
    issuer = claims.iss as string;
  });
  afterAll(() => svc?.stop());

  /** Every claim of the contract (service, username, userid, profile, iat, exp, iss, jti), valid for 10 minutes. */
  const fullClaims = () => {
    const now = Math.floor(Date.now() / 1000);
    return {
      service: 'admin',
      username: 'admin',
      userid: claims.userid,
      profile: 'admin',
      iat: now,
      exp: now + 600,
      iss: issuer,
      jti: crypto.randomUUID(),
    };
  };
  const sign = (payload: Record<string, unknown>, signingKey: Uint8Array = key, alg = 'HS256') =>
    new SignJWT(payload).setProtectedHeader({ alg, typ: 'JWT' }).sign(signingKey);
  const without = (name: string) => {
    const c: Record<string, unknown> = fullClaims();
    delete c[name];
    return c;
  };

  /** GET /template (a real route) and GET on an unknown route, both with `jwt`. */
  const probe = async (jwt: string) => ({
    route: await http('GET', `${svc.base}/template`, { token: jwt }),
    unknown: await http('GET', `${svc.base}/no/such/route`, { token: jwt }),
  });

  it('the service key is the one given in JWT_SECRET: a forged token with every claim is accepted', async () => {
    const jwt = await sign(fullClaims());
    const { route, unknown } = await probe(jwt);
    expect(route.status, route.text).toBe(200);
    expect(route.body).toMatchObject({ templates: expect.any(Array) });
    // Past authentication, an unknown route is a 404, not a 401.
    expect([unknown.status, unknown.body]).toEqual([404, { message: 'Invalid endpoint requested', status: 404 }]);
  });

  it('the tenant comes from the `service` claim of a forged token', async () => {
    const tenant = `forged-${crypto.randomBytes(3).toString('hex')}`;
    const jwt = await sign({ ...fullClaims(), service: tenant });
    const created = await http('POST', `${svc.base}/template`, { token: jwt, body: { label: 'only-in-forged-tenant', attrs: [] } });
    expect(created.status, created.text).toBe(200);
    const mine = await http('GET', `${svc.base}/template`, { token: jwt });
    expect(mine.body.templates.map((t: { label: string }) => t.label)).toEqual(['only-in-forged-tenant']);
    const admins = await http('GET', `${svc.base}/template`, { token: await sign(fullClaims()) });
    expect(admins.body.templates.map((t: { label: string }) => t.label)).not.toContain('only-in-forged-tenant');
  });

  const cases: Array<[string, () => Promise<string>]> = [
    ['signed with the service key but another `iss`', () => sign({ ...fullClaims(), iss: 'someone-else' })],
    ['signed with the service key but no `iss`', () => sign(without('iss'))],
    [
      '`exp` in the past',
      () => sign({ ...fullClaims(), iat: Math.floor(Date.now() / 1000) - 120, exp: Math.floor(Date.now() / 1000) - 60 }),
    ],
    ['no `exp` (a token that never expires)', () => sign(without('exp'))],
    ['no `service` (no tenant)', () => sign(without('service'))],
    ['an empty `service`', () => sign({ ...fullClaims(), service: '' })],
    ['no `username`', () => sign(without('username'))],
    ['no `userid`', () => sign(without('userid'))],
    ['no `profile`', () => sign(without('profile'))],
    ['no `iat`', () => sign(without('iat'))],
    ['no `jti`', () => sign(without('jti'))],
    ['`alg: none` (unsigned)', async () => new UnsecuredJWT(fullClaims()).encode()],
    [
      '`alg: none` header on a token that carries the HS256 signature',
      async () => {
        const [, payload, signature] = (await sign(fullClaims())).split('.');
        return `${Buffer.from(JSON.stringify({ alg: 'none', typ: 'JWT' })).toString('base64url')}.${payload}.${signature}`;
      },
    ],
    [
      'HS256 signed with another key',
      () => sign(fullClaims(), new TextEncoder().encode(`another-${crypto.randomBytes(16).toString('hex')}`)),
    ],
    [
      'a valid token with its payload changed (tenant swapped, signature kept)',
      async () => {
        const [header, , signature] = (await sign(fullClaims())).split('.');
        const payload = Buffer.from(JSON.stringify({ ...fullClaims(), service: 'another-tenant' })).toString('base64url');
        return `${header}.${payload}.${signature}`;
      },
    ],
  ];

  it.each(cases)('%s: 401 "Invalid authentication token" on a route and on an unknown route', async (_name, make) => {
    const jwt = await make();
    const { route, unknown } = await probe(jwt);
    expect([route.status, route.body]).toEqual([401, invalid]);
    expect([unknown.status, unknown.body]).toEqual([401, invalid]);
  });

  it('a token accepted once is refused once its `exp` has passed', async () => {
    const now = Math.floor(Date.now() / 1000);
    const jwt = await sign({ ...fullClaims(), iat: now, exp: now + 2 });
    expect((await http('GET', `${svc.base}/template`, { token: jwt })).status).toBe(200);
    await new Promise((r) => setTimeout(r, (now + 2) * 1000 - Date.now() + 300));
    const { route, unknown } = await probe(jwt);
    expect([route.status, route.body]).toEqual([401, invalid]);
    expect([unknown.status, unknown.body]).toEqual([401, invalid]);
  });
});

// ---------------------------------------------------------------------------------------------
// 2. Logs never contain secrets
// ---------------------------------------------------------------------------------------------

describe('logs never contain secrets', () => {
  it('at LOG_LEVEL=debug, with the embedded database: no password, token, key or generated psk in the output', async () => {
    const secret = (what: string) => `${what}-${crypto.randomBytes(12).toString('hex')}`;
    const adminPassword = secret('admin-pw');
    const userPassword = secret('user-pw');
    const wrongPassword = secret('wrong-pw');
    const unknownUserPassword = secret('nobody-pw');
    const rejectedPassword = secret('rejected-pw');
    const jwtSecret = secret('jwt-secret');
    const pskEncryptionKey = crypto.randomBytes(32).toString('hex');
    const env = await zeroSetupEnv({
      LOG_LEVEL: 'debug',
      ADMIN_PASSWORD: adminPassword,
      JWT_SECRET: jwtSecret,
      PSK_ENCRYPTION_KEY: pskEncryptionKey,
    });
    const { svc, base, internal } = await spawnReady(env, 90_000);

    const adminToken = await login(base, 'admin', adminPassword);
    const created = await http('POST', `${base}/auth/user`, {
      token: adminToken,
      body: { username: 'robust-user', passwd: userPassword, service: 'robust', profile: 'user' },
    });
    expect(created.status, created.text).toBe(201);
    const userToken = await login(base, 'robust-user', userPassword);
    // Failing requests that carry secrets.
    expect((await http('POST', `${base}/auth`, { body: { username: 'admin', passwd: wrongPassword } })).status).toBe(403);
    expect((await http('POST', `${base}/auth`, { body: { username: 'nobody', passwd: unknownUserPassword } })).status).toBe(401);
    const invalidBody = await http('POST', `${base}/auth/user`, {
      token: adminToken,
      body: { username: 'x y', passwd: rejectedPassword, service: 'robust', profile: 'user' },
    });
    expect(invalidBody.status).toBe(400);
    const tampered = `${userToken.slice(0, -4)}${userToken.endsWith('AAAA') ? 'BBBB' : 'AAAA'}`;
    const foreign = await new SignJWT({ service: 'robust', username: 'robust-user', userid: 2, profile: 'user' })
      .setProtectedHeader({ alg: 'HS256' })
      .setIssuer('device-registry')
      .setIssuedAt()
      .setExpirationTime('1h')
      .setJti(crypto.randomUUID())
      .sign(new TextEncoder().encode(secret('foreign-key')));
    for (const bad of [tampered, foreign]) expect((await http('GET', `${base}/template`, { token: bad })).status).toBe(401);

    // The user's token for several requests, among them the generation and copy of pre-shared keys.
    const template = await http('POST', `${base}/template`, {
      token: userToken,
      body: {
        label: 'keyed',
        attrs: [
          { label: 'key', type: 'static', value_type: 'psk' },
          { label: 'temperature', type: 'dynamic', value_type: 'float' },
        ],
      },
    });
    expect(template.status, template.text).toBe(200);
    const devices = await http('POST', `${base}/device?count=2`, {
      token: userToken,
      body: { label: 'keyed', templates: [template.body.template.id] },
    });
    expect(devices.status, devices.text).toBe(200);
    const [first, second] = devices.body.devices.map((d: { id: string }) => d.id) as [string, string];
    const generated = await http('POST', `${base}/device/gen_psk/${first}?key_length=16`, { token: userToken });
    expect(generated.status, generated.text).toBe(200);
    const psk = generated.body[0].psk as string;
    expect(psk).toMatch(/^[0-9a-f]{32}$/);
    const copied = await http('PUT', `${base}/device/${second}/attrs/key/psk?from_dev_id=${first}&from_attr_label=key`, {
      token: userToken,
    });
    expect(copied.status, copied.text).toBe(204);
    const internalView = await http('GET', `${internal}/internal/device/${second}`, { token: userToken });
    expect(internalView.status, internalView.text).toBe(200);
    expect(internalView.text).toContain(psk);
    expect((await http('GET', `${base}/device/${first}`, { token: userToken })).status).toBe(200);
    expect((await http('GET', `${base}/no/such/route`, { token: userToken })).status).toBe(404);

    const { code } = await terminate(svc);
    expect(code).toBe(0);
    const pgPassword = (await fs.readFile(path.join(env.DATA_DIR!, 'pg-password'), 'utf8')).trim();

    const output = svc.output.join('\n');
    // The capture is real: debug lines (the embedded PostgreSQL's own output among them) are there.
    expect(svc.output.some((l) => l.includes('"level":"debug"'))).toBe(true);
    expect(output).toContain('"msg":"stopped"');
    const secrets: Record<string, string> = {
      adminPassword,
      userPassword,
      wrongPassword,
      unknownUserPassword,
      rejectedPassword,
      jwtSecret,
      pskEncryptionKey,
      pgPassword,
      psk,
      // Each token whole, and its signature alone (the part that makes it usable).
      adminToken,
      userToken,
      tampered,
      foreign,
      adminTokenSignature: adminToken.split('.')[2]!,
      userTokenSignature: userToken.split('.')[2]!,
    };
    for (const [name, value] of Object.entries(secrets)) {
      expect(value.length, name).toBeGreaterThanOrEqual(16);
      expect(output.includes(value), `${name} appears in the log output`).toBe(false);
    }
    // The psk in any case, and the key given in PSK_ENCRYPTION_KEY as base64 too.
    expect(output.toLowerCase()).not.toContain(psk);
    expect(output).not.toContain(Buffer.from(psk, 'hex').toString('base64'));
    expect(output).not.toContain(Buffer.from(pskEncryptionKey, 'hex').toString('base64'));
    // At debug too, every line (the embedded PostgreSQL's output included) is one JSON object.
    parseLogLines(svc.output);
  }, 120_000);
});

// ---------------------------------------------------------------------------------------------
// 3. Shutdown with requests in flight
// ---------------------------------------------------------------------------------------------

interface RawOutcome {
  status?: number;
  body?: string;
  /** A transport failure: ECONNREFUSED, ECONNRESET, TIMEOUT, ... */
  error?: string;
}

/**
 * One request on its own connection (no keep-alive pool). `sent` resolves once the whole request
 * was handed to the socket; `done` with the complete answer or the transport failure (never hangs).
 */
function rawRequest(base: string, method: string, pathAndQuery: string, opts: { token?: string; body?: unknown; timeoutMs?: number } = {}) {
  const url = new URL(pathAndQuery, base);
  const payload = opts.body === undefined ? undefined : Buffer.from(JSON.stringify(opts.body));
  let markSent!: () => void;
  const sent = new Promise<void>((r) => (markSent = r));
  const done = new Promise<RawOutcome>((resolve) => {
    let settled = false;
    const finish = (o: RawOutcome) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      markSent();
      resolve(o);
    };
    const req = nodeHttp.request(
      {
        host: url.hostname,
        port: Number(url.port),
        method,
        path: url.pathname + url.search,
        agent: false,
        headers: {
          ...(opts.token ? { authorization: `Bearer ${opts.token}` } : {}),
          ...(payload ? { 'content-type': 'application/json', 'content-length': String(payload.length) } : {}),
        },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('error', (err: NodeJS.ErrnoException) => finish({ error: `incomplete answer (${err.code ?? err.message})` }));
        res.on('aborted', () => finish({ error: 'incomplete answer (aborted)' }));
        res.on('end', () => finish({ status: res.statusCode, body: Buffer.concat(chunks).toString('utf8') }));
      },
    );
    const timer = setTimeout(() => {
      finish({ error: 'TIMEOUT' });
      req.destroy();
    }, opts.timeoutMs ?? 20_000);
    req.on('error', (err: NodeJS.ErrnoException) => finish({ error: err.code ?? err.message }));
    req.on('finish', markSent);
    req.end(payload);
  });
  return { sent, done };
}

describe('shutdown with requests in flight', () => {
  it('SIGTERM while device batches are being created: each gets its whole 200 (and is kept), later connections are refused, exit 0 within 10 s', async () => {
    const env = await testEnv({ LOG_LEVEL: 'info' });
    const { svc, base } = await spawnReady(env);
    const token = await login(base);
    const template = await http('POST', `${base}/template`, {
      token,
      body: { label: 'batch', attrs: [{ label: 'temperature', type: 'dynamic', value_type: 'float' }] },
    });
    expect(template.status, template.text).toBe(200);
    const count = 10_000;
    const batch = (label: string) => {
      const r = rawRequest(base, 'POST', `/device?count=${count}`, { token, body: { label, templates: [template.body.template.id] } });
      return { label, sent: r.sent, done: r.done.then((o) => ({ ...o, at: Date.now() })) };
    };

    // In flight: sent, and given time to reach the service, before the signal.
    const inFlight = ['inflight0', 'inflight1', 'inflight2'].map(batch);
    await Promise.all(inFlight.map((r) => r.sent));
    await new Promise((r) => setTimeout(r, 50));
    const t0 = Date.now();
    svc.child.kill('SIGTERM');
    // Racing the signal: sent at once, before the service may have closed its listeners.
    const racing = ['racing0', 'racing1'].map(batch);
    // "shutting down" is logged in the same synchronous step that closes the listeners; give it
    // ample time, then new connections must be refused.
    await svc.waitFor(/"msg":"shutting down"/, 5_000);
    await new Promise((r) => setTimeout(r, 100));
    const late = await Promise.all(['late0', 'late1', 'late2'].map((l) => batch(l).done));

    const answered = await Promise.all(inFlight.map((r) => r.done));
    for (const [i, o] of answered.entries()) {
      expect(o.error, `in-flight request ${i}: ${o.error}`).toBeUndefined();
      // It really was in flight: answered after the signal.
      expect(o.at).toBeGreaterThanOrEqual(t0);
      expect(o.status, o.body).toBe(200);
      const body = JSON.parse(o.body!);
      expect(body.message).toBe('devices created');
      expect(body.devices).toHaveLength(count);
      expect(body.devices.at(-1).label).toBe(`inflight${i}_${count - 1}`);
    }
    const raced = await Promise.all(racing.map((r) => r.done));
    for (const o of raced) {
      // Either answered in full, or refused at the connection (never a hang, a cut answer or an error status).
      if (o.error) expect(['ECONNREFUSED', 'ECONNRESET']).toContain(o.error);
      else expect([o.status, JSON.parse(o.body!).devices.length]).toEqual([200, count]);
    }
    for (const o of late) expect(o.error).toBe('ECONNREFUSED');

    const code = await svc.exited;
    const ms = Date.now() - t0;
    expect(code).toBe(0);
    expect(ms).toBeLessThan(10_000);
    expect(svc.output.some((l) => l.includes('shutdown timed out'))).toBe(false);

    // Every batch answered 200 was committed whole; nothing of the refused ones was.
    const expected: Record<string, number> = {};
    for (const [i, o] of [...answered, ...raced].entries()) if (o.status === 200) expected[[...inFlight, ...racing][i]!.label] = count;
    const client = new pg.Client({ connectionString: env.DATABASE_URL });
    await client.connect();
    try {
      const { rows } = await client.query<{ label: string; n: number }>(
        `SELECT split_part(label, '_', 1) AS label, count(*)::int AS n FROM devices GROUP BY 1`,
      );
      expect(Object.fromEntries(rows.map((r) => [r.label, r.n]))).toEqual(expected);
    } finally {
      await client.end();
    }
  }, 60_000);
});

// ---------------------------------------------------------------------------------------------
// 4. Log format
// ---------------------------------------------------------------------------------------------

const LEVELS = ['debug', 'info', 'warn', 'error'];

/** Each output line parsed; a line that is not one JSON object with ts, level and msg fails the test. */
function parseLogLines(output: string[]): Array<Record<string, unknown>> {
  const lines = output.filter((l) => l !== '');
  expect(lines.length).toBeGreaterThan(0);
  return lines.map((line) => {
    let parsed: unknown;
    try {
      parsed = JSON.parse(line);
    } catch {
      throw new Error(`not a JSON line: ${line}`);
    }
    expect(typeof parsed === 'object' && parsed !== null && !Array.isArray(parsed), line).toBe(true);
    const entry = parsed as Record<string, unknown>;
    expect(typeof entry.ts, line).toBe('string');
    expect(entry.ts as string, line).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$/);
    expect(Number.isNaN(Date.parse(entry.ts as string)), line).toBe(false);
    expect(LEVELS, line).toContain(entry.level);
    expect(typeof entry.msg, line).toBe('string');
    expect((entry.msg as string).length, line).toBeGreaterThan(0);
    return entry;
  });
}

describe('log format', () => {
  it('a zero-setup start, a few requests and a shutdown: every output line is one JSON object with ts, level and msg', async () => {
    const { svc, base } = await spawnReady(await zeroSetupEnv(), 90_000);
    const token = await login(base);
    await http('GET', `${base}/health`);
    await http('GET', `${base}/template`, { token });
    await http('GET', `${base}/no/such/route`, { token });
    await http('GET', `${base}/template`, { token: 'not.a.token' });
    await http('POST', `${base}/auth`, { body: { username: 'admin', passwd: 'wrong' } });
    await http('POST', `${base}/auth`, { rawBody: 'junk', headers: { 'content-type': 'application/json' } });
    const { code } = await terminate(svc);
    expect(code).toBe(0);
    const entries = parseLogLines(svc.output);
    const msgs = entries.map((e) => e.msg);
    for (const msg of [
      'initialising embedded PostgreSQL',
      'embedded PostgreSQL listening',
      'embedded MQTT broker listening',
      'public HTTP API listening',
      'internal HTTP API listening',
      'ready',
      'shutting down',
      'stopped',
    ]) {
      expect(msgs).toContain(msg);
    }
    // The default level is info: no debug lines.
    expect(entries.filter((e) => e.level === 'debug')).toEqual([]);
  }, 120_000);

  it('LOG_LEVEL=warn: warnings are written, info lines are not', async () => {
    // A first start lays the history table out with one chunk interval; the second start, at
    // warn, is given another one, which it reports with a warning: on plain PostgreSQL that the
    // partitions keep their interval; on TimescaleDB, where new chunks take the new interval,
    // that at the rate of the values written so far a chunk's index would outgrow shared_buffers.
    const timescale = await timescaleLayout();
    const env = await testEnv({ LOG_LEVEL: 'info', HISTORY_CHUNK_INTERVAL: timescale ? '1 hour' : '1 day' });
    const first = await spawnReady(env);
    if (timescale) {
      const db = new pg.Client({ connectionString: env.DATABASE_URL });
      await db.connect();
      await db.query(
        `INSERT INTO history (tenant, device_id, attr, series, ts, value)
         SELECT 'w', 'd' || i, 'v', history_series('w', 'd' || i, 'v'), date_trunc('hour', now()) - interval '1 hour' + (i % 3600) * interval '1 second', '1'
           FROM generate_series(1, 20000) i`,
      );
      await db.end();
    }
    expect((await terminate(first.svc)).code).toBe(0);
    expect(first.svc.output.some((l) => l.includes('"level":"info"'))).toBe(true);

    const port = await freePort();
    const second = spawnService({
      ...env,
      LOG_LEVEL: 'warn',
      HISTORY_CHUNK_INTERVAL: timescale ? '366 days' : '2 days',
      PORT: String(port),
    });
    spawned.push(second);
    await second.waitFor(
      timescale ? /HISTORY_CHUNK_INTERVAL makes the current chunk's index larger than shared_buffers/ : /HISTORY_CHUNK_INTERVAL differs/,
    );
    // At warn the service does not say it is ready: it is once it answers.
    const base = `http://127.0.0.1:${port}`;
    const deadline = Date.now() + 30_000;
    for (;;) {
      const up = await http('GET', `${base}/health`).then(
        (r) => r.status === 200,
        () => false,
      );
      if (up) break;
      if (Date.now() > deadline) throw new Error(`not answering at ${base}:\n${second.output.join('\n')}`);
      await new Promise((r) => setTimeout(r, 100));
    }
    const token = await login(base);
    expect((await http('GET', `${base}/template`, { token })).status).toBe(200);
    expect((await http('GET', `${base}/no/such/route`, { token })).status).toBe(404);
    expect((await terminate(second)).code).toBe(0);
    const entries = parseLogLines(second.output);
    expect(entries.some((e) => e.level === 'warn')).toBe(true);
    expect(entries.filter((e) => e.level === 'info' || e.level === 'debug')).toEqual([]);
  }, 90_000);
});
