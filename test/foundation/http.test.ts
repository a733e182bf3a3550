import net from 'node:net';
import { describe, expect, it } from 'vitest';
import type { DevicesCreated, ErrorBody, UserAnswer } from '../helpers/api.js';
import { countOf } from '../helpers/db.js';
import { takeDatabaseAway } from '../helpers/faults.js';
import { createDevice, createTemplate } from '../helpers/registry-fixtures.js';
import { http, login, startTestService, useService } from '../helpers/service.js';

const svc = useService({ MAX_BODY_BYTES: '2048' });

describe('routing', () => {
  it('unknown route: 404 (after authentication)', async () => {
    const res = await http('GET', `${svc.base}/no/such/thing`, { token: svc.token });
    expect(res.status).toBe(404);
    expect(res.body).toEqual({ message: 'Invalid endpoint requested', status: 404 });
    expect(res.headers.get('content-type')).toBe('application/json');
  });

  it('an empty path segment names no route, but for a trailing slash on a read: DELETE /device/ (an id left empty) removes nothing', async () => {
    const { tenant, token } = await svc.freshTenant('slash');
    const pool = svc.service.pool;
    const template = await createTemplate(pool, tenant, 'thing', [{ label: 'n', type: 'dynamic', value_type: 'integer' }]);
    const device = await createDevice(pool, tenant, [template]);
    for (const [method, path] of [
      ['DELETE', '/device/'],
      ['DELETE', '/device//'],
      ['DELETE', `/device//${device}`],
      ['DELETE', `/device/${device}/`],
      ['PUT', `/device/${device}/`],
      ['POST', '/device/'],
      ['GET', `/device//${device}`],
      ['GET', '//device'],
      ['DELETE', '/template/'],
    ] as const) {
      const res = await http(method, `${svc.base}${path}`, { token });
      expect({ method, path, status: res.status, body: res.body }).toEqual({
        method,
        path,
        status: 404,
        body: { message: 'Invalid endpoint requested', status: 404 },
      });
    }
    expect((await http('GET', `${svc.base}/device/${device}`, { token })).status).toBe(200);
    expect((await http('GET', `${svc.base}/template/${template}`, { token })).status).toBe(200);
    // A read with a trailing slash is the read without it (a browser's /live/ too: test/live/page).
    const slashed = await http<{ id: string }>('GET', `${svc.base}/device/${device}/`, { token });
    expect([slashed.status, slashed.body.id]).toEqual([200, device]);
    expect((await http('HEAD', `${svc.base}/template/${template}/`, { token })).status).toBe(200);
  });

  it('unknown route without a token: 401 (auth comes before routing)', async () => {
    expect((await http('GET', `${svc.base}/no/such/thing`)).status).toBe(401);
  });

  it('HEAD: the GET route answers its status and headers, with the length and no body', async () => {
    const port = Number(new URL(svc.base).port);
    const raw = (request: string) =>
      new Promise<string>((resolve, reject) => {
        let got = '';
        const sock = net.connect(port, '127.0.0.1', () => sock.write(request));
        sock.on('data', (d) => (got += d.toString('latin1')));
        sock.on('error', reject);
        setTimeout(() => {
          sock.destroy();
          resolve(got);
        }, 300);
      });
    const health = await raw('HEAD /health HTTP/1.1\r\nHost: x\r\n\r\n');
    expect(health).toMatch(/^HTTP\/1\.1 200 OK\r\n/);
    expect(health).toMatch(/\r\nContent-Length: 15\r\n/i);
    expect(health.endsWith('\r\n\r\n')).toBe(true);
    const list = await raw(`HEAD /template HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${svc.token}\r\n\r\n`);
    expect(list).toMatch(/^HTTP\/1\.1 200 OK\r\n/);
    expect(list.endsWith('\r\n\r\n')).toBe(true);
    const noToken = await raw('HEAD /template HTTP/1.1\r\nHost: x\r\n\r\n');
    expect(noToken).toMatch(/^HTTP\/1\.1 401 Unauthorized\r\n/);
    expect(noToken.endsWith('\r\n\r\n')).toBe(true);
    const postOnly = await raw(`HEAD /auth/user HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${svc.token}\r\n\r\n`);
    expect(postOnly).toMatch(/^HTTP\/1\.1 405 Method Not Allowed\r\n/);
    expect(postOnly.endsWith('\r\n\r\n')).toBe(true);
  });

  it('known path, wrong method: 405 with a JSON body', async () => {
    const res = await http<ErrorBody>('DELETE', `${svc.base}/auth/user`, { token: svc.token });
    expect(res.status).toBe(405);
    expect(res.body.status).toBe(405);
    expect(res.headers.get('allow')).toBe('POST');
  });

  it('a 405 names HEAD beside GET: every GET route answers HEAD', async () => {
    const res = await http<ErrorBody>('PATCH', `${svc.base}/template`, { token: svc.token });
    expect(res.status).toBe(405);
    expect(res.headers.get('allow')).toBe('POST, GET, HEAD, DELETE');
    expect(res.body.message).toBe('Method not allowed; use POST, GET, HEAD, DELETE');
  });

  it('internal-only listener does not serve public routes', async () => {
    expect((await http('POST', `${svc.internal}/auth`, { body: { username: 'admin', passwd: 'admin' } })).status).toBe(401);
  });
});

describe('request bodies', () => {
  it('over MAX_BODY_BYTES: 413 with a JSON body', async () => {
    const big = JSON.stringify({ username: 'x'.repeat(4000), passwd: 'y', service: 's', profile: 'p' });
    const res = await http('POST', `${svc.base}/auth/user`, {
      token: svc.token,
      rawBody: big,
      headers: { 'content-type': 'application/json' },
    });
    expect(res.status).toBe(413);
    expect(res.body).toEqual({ message: 'Payload too large: the limit is 2048 bytes', status: 413 });
    // the service is still fine
    expect((await http('GET', `${svc.base}/health`)).status).toBe(200);
  });

  it('missing Content-Type: 400 with the contract message', async () => {
    const res = await http('POST', `${svc.base}/auth/user`, { token: svc.token, rawBody: '{}' });
    expect(res.status).toBe(400);
    expect(res.body).toEqual({ message: 'Payload must be valid JSON, and Content-Type set accordingly', status: 400 });
  });

  it('a body that is not UTF-8 is not JSON: 400, nothing created; a leading BOM is ignored', async () => {
    const json = { 'content-type': 'application/json' };
    const user = (name: string) => Buffer.from(`{"username":"${name}","passwd":"pw","service":"t","profile":"user"}`);
    const latin1 = Buffer.concat([
      Buffer.from('{"username":"caf'),
      Buffer.from([0xe9]),
      Buffer.from('","passwd":"pw","service":"t","profile":"user"}'),
    ]);
    const res = await http('POST', `${svc.base}/auth/user`, { token: svc.token, rawBody: latin1, headers: json });
    expect(res.status).toBe(400);
    expect(res.body).toEqual({ message: 'Payload must be valid JSON, and Content-Type set accordingly', status: 400 });
    expect(await countOf(svc.service.pool, "SELECT count(*)::int AS n FROM users WHERE username LIKE 'caf%'")).toBe(0);
    const withBom = await http<UserAnswer>('POST', `${svc.base}/auth/user`, {
      token: svc.token,
      rawBody: Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), user('bom-user')]),
      headers: json,
    });
    expect(withBom.status, withBom.text).toBe(201);
    expect(withBom.body.username).toBe('bom-user');
  });

  it('a lone surrogate escape (not Unicode text) is not JSON either; a surrogate pair is fine', async () => {
    const json = { 'content-type': 'application/json' };
    for (const raw of [
      '{"label":"\\ud800","templates":[]}',
      '{"label":"x\\uDC00","templates":[]}',
      '{"label":"x","templates":[],"\\ud83d":1}',
      '{"label":"x","templates":[],"attrs":[{"label":"a","static_value":"\\udbff"}]}',
    ]) {
      const res = await http('POST', `${svc.base}/device`, { token: svc.token, rawBody: raw, headers: json });
      expect(res.body, raw).toEqual({ message: 'Payload must be valid JSON, and Content-Type set accordingly', status: 400 });
    }
    const pair = await http<DevicesCreated>('POST', `${svc.base}/device`, {
      token: svc.token,
      rawBody: '{"label":"\\ud83d\\ude00 \\\\ud800","templates":[]}',
      headers: json,
    });
    expect(pair.status, pair.text).toBe(200);
    expect(pair.body.devices[0]!.label).toBe('\u{1F600} \\ud800_0');
  });

  it('a body with a surrogate pair escaped and a list of 150,000 items is read like any other (no 500)', async () => {
    // This file's service caps bodies at 2 KiB: one with the default cap (1 MiB).
    const big = await startTestService();
    try {
      const token = await login(big.base);
      const template = await http<{ template: { id: number } }>('POST', `${big.base}/template`, { token, body: { label: 't', attrs: [] } });
      expect(template.status, template.text).toBe(200);
      // The escape makes the body's strings be walked for lone surrogates; that walk overflowed
      // the call stack on a long list (500, RangeError), though the body is well-formed.
      const raw = `{"label":"\\ud83d\\ude00","templates":[${Array<number>(150_000).fill(template.body.template.id).join(',')}]}`;
      expect(raw.length).toBeLessThan(1_048_576);
      const res = await http<DevicesCreated>('POST', `${big.base}/device`, {
        token,
        rawBody: raw,
        headers: { 'content-type': 'application/json' },
      });
      expect(res.status, res.text).toBe(200);
      expect(res.body.devices.map((d) => d.label)).toEqual(['\u{1F600}_0']);
    } finally {
      await big.stop();
    }
  }, 60_000);

  it('a client that goes away mid-body does not hurt the service', async () => {
    const port = new URL(svc.base).port;
    for (let i = 0; i < 20; i++) {
      await new Promise<void>((resolve) => {
        const sock = net.connect(Number(port), '127.0.0.1', () => {
          sock.write(`POST /auth HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"username":`);
          setTimeout(() => {
            sock.destroy();
            resolve();
          }, 5);
        });
      });
    }
    expect((await http('POST', `${svc.base}/auth`, { body: { username: 'admin', passwd: 'admin' } })).status).toBe(200);
  });
});

describe('observability', () => {
  it('GET /metrics: Prometheus text with default and HTTP metrics, labelled by route pattern', async () => {
    await http('GET', `${svc.base}/health`);
    await http('GET', `${svc.base}/no/such/thing`, { token: svc.token });
    const res = await http('GET', `${svc.base}/metrics`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^text\/plain/);
    expect(res.text).toContain('process_cpu_user_seconds_total');
    expect(res.text).toMatch(/http_requests_total\{method="GET",route="\/health",status="200"\} \d+/);
    expect(res.text).toMatch(/http_requests_total\{method="GET",route="<unmatched>",status="404"\}/);
    expect(res.text).toMatch(/http_request_duration_seconds_bucket\{le="0.005",method="GET",route="\/health"\}/);
    expect(res.text).not.toContain('/no/such/thing');
    expect(res.text).not.toContain(svc.token);
  });

  it('GET /health: 200 when the database answers, 503 when it does not', async () => {
    expect((await http('GET', `${svc.base}/health`)).body).toEqual({ status: 'ok' });
    expect((await http('GET', `${svc.internal}/health`)).status).toBe(200);
    // Take the database away from the service: refuse connections and cut the open ones.
    const restore = await takeDatabaseAway(svc.env.DATABASE_URL!);
    try {
      const down = await http('GET', `${svc.base}/health`);
      expect(down.status).toBe(503);
      expect(down.body).toEqual({ message: 'Database unavailable', status: 503 });
      // Every other route that needs the database answers the same 503 (not a 500): retry later.
      const auth = await http('POST', `${svc.base}/auth`, { body: { username: 'admin', passwd: 'admin' } });
      expect(auth.body).toEqual({ message: 'Database unavailable', status: 503 });
      const write = await http('POST', `${svc.base}/template`, { token: svc.token, body: { label: 'while-down', attrs: [] } });
      expect(write.status).toBe(503);
      expect(write.body).toEqual({ message: 'Database unavailable', status: 503 });
    } finally {
      await restore();
    }
    expect((await http('GET', `${svc.base}/health`)).status).toBe(200);
  });
});
