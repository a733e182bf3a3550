// Which tokens are refused, and with which body, when JWT_SECRET is set: tokens forged with the
// service's own key are accepted only with every claim and the right issuer, unexpired.
import crypto from 'node:crypto';
import { SignJWT, UnsecuredJWT } from 'jose';
import { beforeAll, describe, expect, it } from 'vitest';
import type { TemplateCreated, TemplateList } from '../helpers/api.js';
import { http, useService } from '../helpers/service.js';

describe('token validation (JWT_SECRET set: tokens forged with the service key)', () => {
  const SECRET = `token-validation-${crypto.randomBytes(16).toString('hex')}`;
  const key = new TextEncoder().encode(SECRET);
  const invalid = { message: 'Invalid authentication token', status: 401 };
  const svc = useService({ JWT_SECRET: SECRET });
  let issuer: string;
  let claims: Record<string, unknown>;

  beforeAll(() => {
    // The claims of a token the service issued itself: the forged ones start from these.
    const jwt = svc.token;
    claims = JSON.parse(Buffer.from(jwt.split('.')[1]!, 'base64url').toString()) as Record<string, unknown>;
    issuer = claims.iss as string;
  });

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
    route: await http<TemplateList>('GET', `${svc.base}/template`, { token: jwt }),
    unknown: await http('GET', `${svc.base}/no/such/route`, { token: jwt }),
  });

  it('the service key is the one given in JWT_SECRET: a forged token with every claim is accepted', async () => {
    const jwt = await sign(fullClaims());
    const { route, unknown } = await probe(jwt);
    expect(route.status, route.text).toBe(200);
    expect(route.body.templates).toBeInstanceOf(Array);
    // Past authentication, an unknown route is a 404, not a 401.
    expect([unknown.status, unknown.body]).toEqual([404, { message: 'Invalid endpoint requested', status: 404 }]);
  });

  it('the tenant comes from the `service` claim of a forged token', async () => {
    const tenant = `forged-${crypto.randomBytes(3).toString('hex')}`;
    const jwt = await sign({ ...fullClaims(), service: tenant });
    const created = await http<TemplateCreated>('POST', `${svc.base}/template`, {
      token: jwt,
      body: { label: 'only-in-forged-tenant', attrs: [] },
    });
    expect(created.status, created.text).toBe(200);
    const mine = await http<TemplateList>('GET', `${svc.base}/template`, { token: jwt });
    expect(mine.body.templates.map((t: { label: string }) => t.label)).toEqual(['only-in-forged-tenant']);
    const admins = await http<TemplateList>('GET', `${svc.base}/template`, { token: await sign(fullClaims()) });
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
    ['`alg: none` (unsigned)', () => Promise.resolve(new UnsecuredJWT(fullClaims()).encode())],
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
    // RFC 7515 §2 / RFC 7519 §7.2: base64url without padding, nothing else; the token must be
    // refused, not decoded leniently (the same signature must not have several spellings).
    ['a valid token with `=` padding appended to its signature', async () => `${await sign(fullClaims())}=`],
    [
      'a valid token whose signature ends in another spelling of the same bytes (non-zero unused bits)',
      async () => {
        const jwt = await sign(fullClaims());
        const signature = jwt.slice(jwt.lastIndexOf('.') + 1);
        const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';
        // 32 bytes are 43 characters: the last one carries 4 bits of the signature and 2 unused bits.
        const last = alphabet.indexOf(signature.at(-1)!);
        const other = alphabet[(last & ~3) | ((last + 1) & 3)]!;
        const respelled = signature.slice(0, -1) + other;
        expect(Buffer.from(respelled, 'base64url').equals(Buffer.from(signature, 'base64url'))).toBe(true);
        return jwt.slice(0, jwt.lastIndexOf('.') + 1) + respelled;
      },
    ],
    [
      'a valid token with `=` padding in its payload segment',
      async () => {
        const [header, payload, signature] = (await sign(fullClaims())).split('.');
        return `${header}.${payload}=.${signature}`;
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
    expect((await http<TemplateList>('GET', `${svc.base}/template`, { token: jwt })).status).toBe(200);
    await new Promise((r) => setTimeout(r, (now + 2) * 1000 - Date.now() + 300));
    const { route, unknown } = await probe(jwt);
    expect([route.status, route.body]).toEqual([401, invalid]);
    expect([unknown.status, unknown.body]).toEqual([401, invalid]);
  });
});
