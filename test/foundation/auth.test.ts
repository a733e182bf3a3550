import crypto from 'node:crypto';
import { SignJWT, UnsecuredJWT } from 'jose';
import { describe, expect, it } from 'vitest';
import type { ErrorBody, TokenAnswer, UserAnswer } from '../helpers/api.js';
import { http, login, tenantToken, useService } from '../helpers/service.js';

const SECRET = 'test-secret-that-is-long-enough-0123456789';

const svc = useService({ JWT_SECRET: SECRET, TOKEN_TTL_SECONDS: '120' });

/** The claims of a token the service issued. */
interface Claims {
  service: string;
  username: string;
  userid: number;
  profile: string;
  iss: string;
  jti: string;
  iat: number;
  exp: number;
}

const claimsOf = (jwt: string) => JSON.parse(Buffer.from(jwt.split('.')[1]!, 'base64url').toString()) as Claims;

function forge(claims: Record<string, unknown>, key = SECRET, iss = 'device-registry') {
  return new SignJWT(claims)
    .setProtectedHeader({ alg: 'HS256' })
    .setIssuer(iss)
    .setJti(crypto.randomUUID())
    .sign(new TextEncoder().encode(key));
}
const validClaims = { service: 'admin', username: 'admin', userid: 1, profile: 'admin' };

describe('POST /auth', () => {
  it('issues a token with the listed claims and the configured lifetime', async () => {
    const res = await http<TokenAnswer>('POST', `${svc.base}/auth`, { body: { username: 'admin', passwd: 'admin' } });
    expect(res.status).toBe(200);
    expect(Object.keys(res.body)).toEqual(['jwt']);
    const c = claimsOf(res.body.jwt);
    expect(c).toMatchObject({ service: 'admin', username: 'admin', profile: 'admin', iss: 'device-registry' });
    expect(typeof c.userid).toBe('number');
    expect(typeof c.jti).toBe('string');
    expect(c.exp - c.iat).toBe(120);
  });

  it('accepts a JSON content type with parameters', async () => {
    const res = await http('POST', `${svc.base}/auth`, {
      rawBody: JSON.stringify({ username: 'admin', passwd: 'admin' }),
      headers: { 'content-type': 'application/json; charset=utf-8' },
    });
    expect(res.status).toBe(200);
  });

  it('unknown user: 401 AuthenticationError', async () => {
    const res = await http('POST', `${svc.base}/auth`, { body: { username: 'nobody', passwd: 'x' } });
    expect(res.status).toBe(401);
    expect(res.body).toEqual({ message: 'AuthenticationError', status: 401 });
    const nul = await http('POST', `${svc.base}/auth`, { body: { username: 'admin\u0000', passwd: 'x' } });
    expect([nul.status, nul.body]).toEqual([401, { message: 'AuthenticationError', status: 401 }]);
  });

  it('wrong password: 403 AuthorizationError', async () => {
    const res = await http('POST', `${svc.base}/auth`, { body: { username: 'admin', passwd: 'wrong' } });
    expect(res.status).toBe(403);
    expect(res.body).toEqual({ message: 'AuthorizationError', status: 403 });
  });

  it('missing fields', async () => {
    expect((await http('POST', `${svc.base}/auth`, { body: { passwd: 'x' } })).body).toEqual({ message: 'missing username', status: 400 });
    expect((await http('POST', `${svc.base}/auth`, { body: { username: 'admin' } })).body).toEqual({
      message: 'missing password',
      status: 400,
    });
    expect((await http('POST', `${svc.base}/auth`, { body: {} })).status).toBe(400);
  });

  it('not JSON: 400 invalid mimetype', async () => {
    const bad = [
      { rawBody: '{"username":', headers: { 'content-type': 'application/json' } },
      { rawBody: JSON.stringify({ username: 'admin', passwd: 'admin' }), headers: { 'content-type': 'text/plain' } },
      { rawBody: JSON.stringify({ username: 'admin', passwd: 'admin' }) },
      { rawBody: '[1,2]', headers: { 'content-type': 'application/json' } },
    ];
    for (const opts of bad) {
      const res = await http('POST', `${svc.base}/auth`, opts);
      expect(res.status).toBe(400);
      expect(res.body).toEqual({ message: 'invalid mimetype', status: 400 });
    }
  });

  it('stores passwords as salted slow hashes, never in clear', async () => {
    const { rows } = await svc.service.pool.query<{ password_hash: string }>('SELECT password_hash FROM users WHERE username = $1', [
      'admin',
    ]);
    expect(rows[0]!.password_hash).toMatch(/^scrypt\$/);
    expect(rows[0]!.password_hash).not.toContain('admin');
  });
});

describe('token verification', () => {
  const probe = (headers: Record<string, string>) => http('GET', `${svc.base}/auth/user`, { headers });

  it('no Authorization header: 401', async () => {
    const res = await http('GET', `${svc.base}/anything`);
    expect(res.status).toBe(401);
    expect(res.body).toEqual({ message: 'No authorization token has been supplied', status: 401 });
  });

  it('a valid token passes (to routing: 405 here, since /auth/user is POST only)', async () => {
    expect((await probe({ authorization: `Bearer ${svc.token}` })).status).toBe(405);
  });

  it.each(['bearer', 'BEARER', 'Bearer  ', 'bEaReR '])(
    'the scheme is case-insensitive and may be followed by several spaces (RFC 9110 §11.1, RFC 6750 §2.1): "%s <token>" passes',
    async (scheme) => {
      expect((await probe({ authorization: `${scheme} ${svc.token}` })).status).toBe(405);
    },
  );

  const invalid = { message: 'Invalid authentication token', status: 401 };

  it.each([
    ['malformed', 'Bearer not.a.token'],
    ['empty bearer', 'Bearer '],
    ['bare scheme', 'Bearer'],
    ['other scheme', 'Basic YWRtaW46YWRtaW4='],
  ])('%s: 401 invalid token', async (_name, header) => {
    const res = await probe({ authorization: header });
    expect(res.status).toBe(401);
    expect(res.body).toEqual(invalid);
  });

  it.each([' junk', ' x y', ',x'])('a valid token followed by "%s": 401 invalid token', async (tail) => {
    const res = await probe({ authorization: `Bearer ${svc.token}${tail}` });
    expect(res.status).toBe(401);
    expect(res.body).toEqual(invalid);
  });

  it('expired token: 401', async () => {
    const now = Math.floor(Date.now() / 1000);
    const jwt = await new SignJWT(validClaims)
      .setProtectedHeader({ alg: 'HS256' })
      .setIssuer('device-registry')
      .setJti('x')
      .setIssuedAt(now - 100)
      .setExpirationTime(now - 10)
      .sign(new TextEncoder().encode(SECRET));
    const res = await probe({ authorization: `Bearer ${jwt}` });
    expect(res.status).toBe(401);
    expect(res.body).toEqual(invalid);
  });

  it('token signed with another key: 401', async () => {
    const jwt = await new SignJWT(validClaims)
      .setProtectedHeader({ alg: 'HS256' })
      .setIssuer('device-registry')
      .setJti('x')
      .setIssuedAt()
      .setExpirationTime('1h')
      .sign(new TextEncoder().encode('another-secret-that-is-long-enough-xxxxxx'));
    expect((await probe({ authorization: `Bearer ${jwt}` })).body).toEqual(invalid);
  });

  it('alg none: 401', async () => {
    const jwt = new UnsecuredJWT(validClaims).setIssuer('device-registry').setIssuedAt().setExpirationTime('1h').setJti('x').encode();
    expect((await probe({ authorization: `Bearer ${jwt}` })).body).toEqual(invalid);
  });

  it('a correctly signed token without the tenant claim: 401', async () => {
    const now = Math.floor(Date.now() / 1000);
    const jwt = await forge({ username: 'admin', userid: 1, profile: 'admin', iat: now, exp: now + 60 });
    expect((await probe({ authorization: `Bearer ${jwt}` })).body).toEqual(invalid);
  });

  it('a correctly signed token with every claim passes', async () => {
    const now = Math.floor(Date.now() / 1000);
    const jwt = await forge({ ...validClaims, iat: now, exp: now + 60 });
    expect((await probe({ authorization: `Bearer ${jwt}` })).status).toBe(405);
  });
});

describe('POST /auth/user', () => {
  it('an admin creates a user in any tenant: 201 without any password field', async () => {
    const res = await http<UserAnswer>('POST', `${svc.base}/auth/user`, {
      token: svc.token,
      body: { username: 'alice', passwd: 'pw-alice', service: 'acme', profile: 'user' },
    });
    expect(res.status).toBe(201);
    expect(res.body).toMatchObject({ username: 'alice', service: 'acme', profile: 'user' });
    expect(typeof res.body.id).toBe('number');
    expect(res.body.created).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}\+00:00$/);
    // The stored time to the microsecond, as every other created (not cut to milliseconds).
    const stored = await svc.service.pool.query<{ t: string }>(
      `SELECT to_char(created AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"+00:00"') AS t FROM users WHERE username = 'alice'`,
    );
    expect(res.body.created).toBe(stored.rows[0]!.t);
    expect(JSON.stringify(res.body)).not.toMatch(/passw|pw-alice|hash/i);
    const token = await login(svc.base, 'alice', 'pw-alice');
    expect(claimsOf(token)).toMatchObject({ service: 'acme', username: 'alice', profile: 'user' });
  });

  it('duplicate username: 409', async () => {
    const body = { username: 'bob', passwd: 'pw', service: 'acme', profile: 'user' };
    expect((await http('POST', `${svc.base}/auth/user`, { token: svc.token, body })).status).toBe(201);
    const res = await http('POST', `${svc.base}/auth/user`, { token: svc.token, body });
    expect(res.status).toBe(409);
    expect(res.body).toEqual({ message: 'User bob already exists', status: 409 });
  });

  it('non-admin profile: 403', async () => {
    await http('POST', `${svc.base}/auth/user`, {
      token: svc.token,
      body: { username: 'carol', passwd: 'pw', service: 'acme', profile: 'user' },
    });
    const carol = await login(svc.base, 'carol', 'pw');
    const res = await http<ErrorBody>('POST', `${svc.base}/auth/user`, {
      token: carol,
      body: { username: 'dave', passwd: 'pw', service: 'acme', profile: 'admin' },
    });
    expect(res.status).toBe(403);
    expect(res.body.status).toBe(403);
    expect((await http('POST', `${svc.base}/auth`, { body: { username: 'dave', passwd: 'pw' } })).status).toBe(401);
    // The profile is checked before the body: a non-admin learns nothing from its validation.
    const junk = await http('POST', `${svc.base}/auth/user`, {
      token: carol,
      rawBody: 'junk',
      headers: { 'content-type': 'application/json' },
    });
    expect(junk.body).toEqual({ message: 'Forbidden: this action needs the admin profile', status: 403 });
  });

  // Tenant isolation (found by an audit): an admin of tenant acme could create a user, even an
  // admin, of any other tenant, and so log in there and read its registry. Only the admins of
  // tenant admin (the first admin's) create users of other tenants.
  it("an admin of another tenant than admin creates users of its own tenant only: 403 for another's, nothing created", async () => {
    const acme = `iso-${crypto.randomBytes(3).toString('hex')}`;
    const admin = await tenantToken(svc.base, svc.token, acme, 'admin');
    const own = await http('POST', `${svc.base}/auth/user`, {
      token: admin,
      body: { username: `${acme}-own`, passwd: 'pw-own', service: acme, profile: 'user' },
    });
    expect(own.status).toBe(201);
    for (const service of ['globex', 'admin']) {
      const res = await http('POST', `${svc.base}/auth/user`, {
        token: admin,
        body: { username: `${acme}-into-${service}`, passwd: 'pw-into', service, profile: 'admin' },
      });
      expect({ status: res.status, body: res.body }).toEqual({
        status: 403,
        body: {
          message: `Forbidden: an admin of tenant ${acme} creates users of tenant ${acme} only (other tenants' users are created by an admin of tenant admin)`,
          status: 403,
        },
      });
      expect((await http('POST', `${svc.base}/auth`, { body: { username: `${acme}-into-${service}`, passwd: 'pw-into' } })).status).toBe(
        401,
      );
    }
    // The first admin (tenant admin) still creates users of any tenant.
    const platform = await http('POST', `${svc.base}/auth/user`, {
      token: svc.token,
      body: { username: `${acme}-by-platform`, passwd: 'pw', service: 'globex', profile: 'user' },
    });
    expect(platform.status).toBe(201);
  });

  it('invalid body: 400 with the validation body, nothing created', async () => {
    const res = await http('POST', `${svc.base}/auth/user`, { token: svc.token, body: { username: 'erin', passwd: 5, profile: 'user' } });
    expect(res.status).toBe(400);
    expect(res.body).toEqual({
      message: 'failed to parse input',
      errors: { passwd: ['Not a valid string.'], service: ['Missing data for required field.'] },
    });
    expect((await http('POST', `${svc.base}/auth`, { body: { username: 'erin', passwd: 'x' } })).status).toBe(401);
  });

  it('each field failure has its own text; NUL anywhere is a 400, never a database error', async () => {
    const long = 'u'.repeat(129);
    const res = await http('POST', `${svc.base}/auth/user`, {
      token: svc.token,
      body: { username: long, passwd: 'a\u0000b', service: 'bad tenant', profile: 'a\u0000b' },
    });
    expect(res.status).toBe(400);
    expect(res.body).toEqual({
      message: 'failed to parse input',
      errors: {
        username: ['Longer than maximum length 128.'],
        passwd: ['Must not contain the NUL character.'],
        service: ['Tenants may contain letters, numbers or dashes(-_)'],
        profile: ['Must not contain the NUL character.'],
      },
    });
    const pattern = await http('POST', `${svc.base}/auth/user`, {
      token: svc.token,
      body: { username: 'a b', passwd: 'x', service: 'acme', profile: 'user' },
    });
    expect(pattern.body).toEqual({
      message: 'failed to parse input',
      errors: { username: ['Usernames may contain letters, numbers and .@_-'] },
    });
  });

  it('body not JSON: 400 with the contract message', async () => {
    const res = await http('POST', `${svc.base}/auth/user`, {
      token: svc.token,
      rawBody: 'x',
      headers: { 'content-type': 'application/json' },
    });
    expect(res.body).toEqual({ message: 'Payload must be valid JSON, and Content-Type set accordingly', status: 400 });
  });

  it('requires a token', async () => {
    const res = await http('POST', `${svc.base}/auth/user`, { body: { username: 'x', passwd: 'x', service: 'x', profile: 'x' } });
    expect(res.status).toBe(401);
  });
});
