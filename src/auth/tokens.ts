// Tokens: HS256 JWTs signed by the service (jose). Verification accepts only HS256 from our
// issuer with every claim present; verified tokens are cached until they expire so the hot
// path does no crypto for a token it has already seen.
import crypto from 'node:crypto';
import { SignJWT, jwtVerify } from 'jose';

export interface TokenUser {
  id: number;
  tenant: string;
  username: string;
  profile: string;
}

/** The verified token's claims (decisions.md "Authentication"). */
export interface Claims {
  service: string;
  username: string;
  userid: number;
  profile: string;
  iat: number;
  exp: number;
  iss: string;
  jti: string;
}

const CACHE_MAX = 10_000;

const BASE64URL = /^[A-Za-z0-9_-]+$/;

/**
 * Three segments of base64url as RFC 7515 §2 defines it (no padding, no other characters, the
 * unused bits of the last character zero), as RFC 7519 §7.2 requires before any check. jose
 * decodes leniently: a trailing `=`, or a last character that differs only in its unused bits,
 * would give one signature several accepted spellings.
 */
function isCanonicalCompact(token: string): boolean {
  const segments = token.split('.');
  return segments.length === 3 && segments.every((s) => BASE64URL.test(s) && Buffer.from(s, 'base64url').toString('base64url') === s);
}

export class Tokens {
  private readonly cache = new Map<string, Claims>();

  constructor(
    private readonly key: Uint8Array,
    private readonly issuer: string,
    private readonly ttlSeconds: number,
  ) {}

  async issue(user: TokenUser): Promise<string> {
    return new SignJWT({ service: user.tenant, username: user.username, userid: user.id, profile: user.profile })
      .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
      .setIssuedAt()
      .setIssuer(this.issuer)
      .setExpirationTime(Math.floor(Date.now() / 1000) + this.ttlSeconds)
      .setJti(crypto.randomUUID())
      .sign(this.key);
  }

  /** The token's claims, or undefined when it is malformed, badly signed, expired or lacks a claim. */
  async verify(token: string): Promise<Claims | undefined> {
    const now = Date.now() / 1000;
    const hit = this.cache.get(token);
    if (hit) {
      if (hit.exp > now) return hit;
      this.cache.delete(token);
      return undefined;
    }
    if (!isCanonicalCompact(token)) return undefined;
    let payload: Record<string, unknown>;
    try {
      ({ payload } = await jwtVerify(token, this.key, {
        algorithms: ['HS256'],
        issuer: this.issuer,
        requiredClaims: ['exp', 'iat', 'jti'],
      }));
    } catch {
      return undefined;
    }
    // Not yet Claims: jose types the payload loosely; the fields the registry needs are checked next.
    const claims = payload as unknown as Claims;
    if (
      typeof claims.service !== 'string' ||
      claims.service === '' ||
      typeof claims.username !== 'string' ||
      typeof claims.userid !== 'number' ||
      typeof claims.profile !== 'string'
    ) {
      return undefined;
    }
    if (this.cache.size >= CACHE_MAX) this.cache.delete(this.cache.keys().next().value as string);
    this.cache.set(token, claims);
    return claims;
  }
}
