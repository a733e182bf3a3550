// The credentials API (docs/credentials.md): create (generated or chosen secret, expiry), list
// (metadata only), delete; the bound per device; tenant scoping; errors in `{message, status}`.
import { beforeAll, describe, expect, it } from 'vitest';
import { http, useService } from '../helpers/service.js';
import { deleteCredential, newCredential, newDevice, newTenant, type Tenant } from './fixtures.js';
import type { CredentialCreated, CredentialView } from '../helpers/api.js';

const MAX = 3;
const TIME = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}\+00:00$/;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

const svc = useService({ MAX_DEVICE_CREDENTIALS: String(MAX) });
let t: Tenant;

beforeAll(async () => {
  t = await newTenant(svc);
});

const url = (device: string, id?: string) => `${svc.base}/device/${device}/credentials${id ? `/${id}` : ''}`;

describe('POST /device/{id}/credentials', () => {
  it('generates a secret of at least 128 random bits as URL-safe text, answered once with its metadata', async () => {
    const d = await newDevice(svc, t);
    const a = await http<CredentialCreated>('POST', url(d), { token: t.token, body: { type: 'password' } });
    expect(a.status).toBe(201);
    expect(Object.keys(a.body).sort()).toEqual(['created_at', 'expires_at', 'id', 'secret', 'type']);
    expect(a.body).toMatchObject({ type: 'password', expires_at: null });
    expect(a.body.id).toMatch(UUID);
    expect(a.body.created_at).toMatch(TIME);
    expect(a.body.secret).toMatch(/^[A-Za-z0-9_-]+$/);
    expect(Buffer.from(a.body.secret, 'base64url').length * 8).toBeGreaterThanOrEqual(128);
    const b = await newCredential(svc, t, d);
    expect(b.secret).not.toBe(a.body.secret);
  });

  it('the answer holding the secret is not to be kept by any cache (Cache-Control: no-store); the list is metadata and may be', async () => {
    const d = await newDevice(svc, t);
    const created = await http<CredentialCreated>('POST', url(d), { token: t.token, body: { type: 'password' } });
    expect(created.status).toBe(201);
    expect(created.headers.get('cache-control')).toBe('no-store');
    const listed = await http('GET', url(d), { token: t.token });
    expect(listed.status).toBe(200);
    expect(listed.headers.get('cache-control')).toBeNull();
  });

  it('takes an expiry (any ISO 8601 offset) and a client-chosen secret', async () => {
    const d = await newDevice(svc, t);
    const c = await newCredential(svc, t, d, { type: 'password', expires_at: '2099-06-30T14:00:00+02:00', secret: 'my-own-secret-0123' });
    expect(c.expires_at).toBe('2099-06-30T12:00:00.000000+00:00');
    expect(c.secret).toBe('my-own-secret-0123');
  });

  it('keeps an expiry to the microsecond, as every time of the answers is written (more digits: rounded down)', async () => {
    const d = await newDevice(svc, t);
    const c = await newCredential(svc, t, d, { type: 'password', expires_at: '2099-06-30T14:00:00.1234567+02:00' });
    expect(c.expires_at).toBe('2099-06-30T12:00:00.123456+00:00');
    expect((await http<CredentialView[]>('GET', url(d), { token: t.token })).body[0]!.expires_at).toBe(c.expires_at);
  });

  it('takes a fraction of any length, as ISO 8601 and the other times of the API do', async () => {
    const d = await newDevice(svc, t);
    const c = await newCredential(svc, t, d, { type: 'password', expires_at: '2099-06-30T14:00:00.1234567891234+02:00' });
    expect(c.expires_at).toBe('2099-06-30T12:00:00.123456+00:00');
  });

  it('reads the forms the other times of the API read: a lower-case t (as a lower-case z), a blank, an hour-only offset', async () => {
    // Found by an audit: `2099-06-30t14:00:00Z` and `2099-06-30T14:00:00+02` (ISO 8601's ±hh
    // offset) were a 400 "must be an ISO 8601 date and time with a time zone", while a lower-case
    // z was taken and ingest and history bounds read all of them.
    const d = await newDevice(svc, t);
    const cases: Array<[string, string]> = [
      ['2099-06-30t14:00:00Z', '2099-06-30T14:00:00.000000+00:00'],
      ['2099-06-30t14:00:00.5z', '2099-06-30T14:00:00.500000+00:00'],
      ['2099-06-30 14:00:00+00:00', '2099-06-30T14:00:00.000000+00:00'],
      ['2099-06-30T14:00:00+02', '2099-06-30T12:00:00.000000+00:00'],
      ['2099-06-30 14:00:00-05', '2099-06-30T19:00:00.000000+00:00'],
    ];
    const seen: Array<[string, unknown]> = [];
    for (const [given] of cases) {
      const res = await http<CredentialCreated>('POST', url(d), { token: t.token, body: { type: 'password', expires_at: given } });
      seen.push([given, res.body.expires_at ?? res.body]);
      if (res.status === 201) await deleteCredential(svc, t, d, res.body.id);
    }
    expect(seen).toEqual(cases);
    const late = await http('POST', url(d), { token: t.token, body: { type: 'password', expires_at: '9999-12-31T23:59:59-12' } });
    expect(late.body).toEqual({ message: 'expires_at must be 9999-12-31T23:59:59.999Z or earlier', status: 400 });
  });

  it('expires_at null, as the answers write "never", is the same as leaving it out', async () => {
    const d = await newDevice(svc, t);
    const c = await newCredential(svc, t, d, { type: 'password', expires_at: null });
    expect(c.expires_at).toBeNull();
  });

  it('answers bad bodies with a {message, status} 400 naming the field, before the device lookup', async () => {
    const d = await newDevice(svc, t);
    const cases: Array<[unknown, string]> = [
      [{}, 'type must be "password"'],
      [{ type: 'token' }, 'type must be "password"'],
      [[], 'The body must be a JSON object such as {"type": "password"}'],
      [
        { type: 'password', expires_at: 'tomorrow' },
        'expires_at must be an ISO 8601 date and time with a time zone, such as 2027-01-31T00:00:00Z',
      ],
      [
        { type: 'password', expires_at: '2099-02-30T00:00:00Z' },
        'expires_at must be an ISO 8601 date and time with a time zone, such as 2027-01-31T00:00:00Z',
      ],
      [{ type: 'password', expires_at: '2001-01-01T00:00:00Z' }, 'expires_at must be in the future'],
      // So is a time before 1970 (found by an audit: it was "must be an ISO 8601 ...").
      [{ type: 'password', expires_at: '1969-12-31T23:59:59Z' }, 'expires_at must be in the future'],
      [{ type: 'password', expires_at: '1970-01-01T00:30:00+01:00' }, 'expires_at must be in the future'],
      [{ type: 'password', expires_at: '0001-01-01T00:00:00Z' }, 'expires_at must be in the future'],
      // Year 9999 in a zone behind UTC is past the last time kept (found by an audit: it was "must be an ISO 8601 ...").
      [{ type: 'password', expires_at: '9999-12-31T23:59:59-12:00' }, 'expires_at must be 9999-12-31T23:59:59.999Z or earlier'],
      // So is a microsecond within its last millisecond (found by an audit: it was "must be an ISO 8601 ...").
      [{ type: 'password', expires_at: '9999-12-31T23:59:59.9995Z' }, 'expires_at must be 9999-12-31T23:59:59.999Z or earlier'],
      [{ type: 'password', secret: 'too-short' }, 'secret must be 16 to 256 printable ASCII characters without spaces'],
      [{ type: 'password', secret: 'has spaces in it, sixteen+' }, 'secret must be 16 to 256 printable ASCII characters without spaces'],
      [{ type: 'password', secret: 1234567890123456 }, 'secret must be 16 to 256 printable ASCII characters without spaces'],
      // A misspelt field is refused, not ignored (an expiry under another name made a credential that never expires).
      [{ type: 'password', expiresAt: '2099-01-01T00:00:00Z' }, 'Unknown field "expiresAt": the body takes type, expires_at and secret'],
      [{ type: 'password', Secret: 'my-own-secret-0123' }, 'Unknown field "Secret": the body takes type, expires_at and secret'],
    ];
    for (const [body, message] of cases) {
      for (const device of [d, 'ffffff']) {
        const res = await http('POST', url(device), { token: t.token, body });
        expect({ body, res: res.body }).toEqual({ body, res: { message, status: 400 } });
      }
    }
    const notJson = await http('POST', url(d), {
      token: t.token,
      rawBody: 'type=password',
      headers: { 'content-type': 'application/json' },
    });
    expect(notJson.body).toEqual({ message: 'Payload must be valid JSON, and Content-Type set accordingly', status: 400 });
    expect((await http('GET', url(d), { token: t.token })).body).toEqual([]);
  });

  it('unknown device: 404; another tenant’s device is unknown too', async () => {
    const d = await newDevice(svc, t);
    expect((await http('POST', url('ffffff'), { token: t.token, body: { type: 'password' } })).body).toEqual({
      message: 'No such device: ffffff',
      status: 404,
    });
    const other = await newTenant(svc);
    for (const [method, u] of [
      ['POST', url(d)],
      ['GET', url(d)],
      ['DELETE', url(d, '6f1c2a8e-3b4d-4e5f-8a9b-0c1d2e3f4a5b')],
    ] as const) {
      const res = await http(method, u, { token: other.token, body: method === 'POST' ? { type: 'password' } : undefined });
      expect(res.status).toBe(404);
      expect(res.body).toEqual({ message: `No such device: ${d}`, status: 404 });
    }
    expect((await http('GET', url(d), { token: t.token })).body).toEqual([]);
  });

  it(`a device holds at most MAX_DEVICE_CREDENTIALS (${MAX}); past it 400, and deleting one makes room`, async () => {
    const d = await newDevice(svc, t);
    const made = [];
    for (let i = 0; i < MAX; i++) made.push(await newCredential(svc, t, d));
    const over = await http('POST', url(d), { token: t.token, body: { type: 'password' } });
    expect(over.body).toEqual({ message: `A device holds at most ${MAX} credentials; delete one first`, status: 400 });
    expect((await deleteCredential(svc, t, d, made[0]!.id)).status).toBe(200);
    await newCredential(svc, t, d);
  });

  it('concurrent creations never pass the bound', async () => {
    const d = await newDevice(svc, t);
    const results = await Promise.all(
      Array.from({ length: MAX + 4 }, () => http('POST', url(d), { token: t.token, body: { type: 'password' } })),
    );
    expect(results.filter((r) => r.status === 201)).toHaveLength(MAX);
    expect(results.filter((r) => r.status === 400)).toHaveLength(4);
  });
});

describe('GET /device/{id}/credentials', () => {
  it('lists metadata only, oldest first: never a secret or a hash', async () => {
    const d = await newDevice(svc, t);
    const a = await newCredential(svc, t, d);
    const b = await newCredential(svc, t, d, { type: 'password', expires_at: '2099-01-01T00:00:00Z', secret: 'chosen-secret-123456' });
    const res = await http('GET', url(d), { token: t.token });
    expect(res.status).toBe(200);
    expect(res.body).toEqual([
      { id: a.id, type: 'password', created_at: a.created_at, expires_at: null, last_used_at: null },
      { id: b.id, type: 'password', created_at: b.created_at, expires_at: '2099-01-01T00:00:00.000000+00:00', last_used_at: null },
    ]);
    expect(res.text).not.toContain(a.secret);
    expect(res.text).not.toContain(b.secret);
    expect(res.text).not.toMatch(/hmac|scrypt/);
  });

  it('unknown device: 404', async () => {
    expect((await http('GET', url('ffffff'), { token: t.token })).body).toEqual({ message: 'No such device: ffffff', status: 404 });
  });
});

describe('DELETE /device/{id}/credentials/{credId}', () => {
  it('removes it and answers its metadata; a second delete is 404', async () => {
    const d = await newDevice(svc, t);
    const a = await newCredential(svc, t, d);
    const b = await newCredential(svc, t, d);
    const res = await deleteCredential(svc, t, d, a.id);
    expect(res.status).toBe(200);
    expect(res.body).toEqual({
      result: 'ok',
      removed_credential: { id: a.id, type: 'password', created_at: a.created_at, expires_at: null, last_used_at: null },
    });
    expect((await http<CredentialView[]>('GET', url(d), { token: t.token })).body.map((c) => c.id)).toEqual([b.id]);
    expect((await deleteCredential(svc, t, d, a.id)).body).toEqual({ message: `No such credential: ${a.id}`, status: 404 });
  });

  it('a credential of another device, or an id that is no UUID, is no such credential', async () => {
    const d = await newDevice(svc, t);
    const other = await newDevice(svc, t);
    const c = await newCredential(svc, t, other);
    expect((await deleteCredential(svc, t, d, c.id)).body).toEqual({ message: `No such credential: ${c.id}`, status: 404 });
    expect((await deleteCredential(svc, t, d, 'not-a-uuid')).body).toEqual({ message: 'No such credential: not-a-uuid', status: 404 });
    expect((await deleteCredential(svc, t, 'ffffff', c.id)).body).toEqual({ message: 'No such device: ffffff', status: 404 });
    expect((await http('GET', url(other), { token: t.token })).body).toHaveLength(1);
  });

  it('takes the id in either case, as a UUID may be written', async () => {
    const d = await newDevice(svc, t);
    const c = await newCredential(svc, t, d);
    const res = await deleteCredential(svc, t, d, c.id.toUpperCase());
    expect(res.status).toBe(200);
    expect((res.body as { removed_credential: { id: string } }).removed_credential.id).toBe(c.id);
    expect((await http('GET', url(d), { token: t.token })).body).toEqual([]);
  });

  it('removing the device removes its credentials', async () => {
    const d = await newDevice(svc, t);
    await newCredential(svc, t, d);
    await newCredential(svc, t, d);
    expect((await http('DELETE', `${svc.base}/device/${d}`, { token: t.token })).status).toBe(200);
    const { rows } = await svc.service.pool.query<{ n: number }>(
      'SELECT count(*)::int AS n FROM device_credentials WHERE tenant = $1 AND device_id = $2',
      [t.name, d],
    );
    expect(rows[0]!.n).toBe(0);
  });

  it('needs a token like every route', async () => {
    const d = await newDevice(svc, t);
    expect((await http('GET', url(d))).body).toEqual({ message: 'No authorization token has been supplied', status: 401 });
  });
});
