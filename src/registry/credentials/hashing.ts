// How a device credential's secret is kept: never in clear, only as a hash that cannot log a
// device in by itself.
//   - generated secrets (at least 128 random bits): a keyed hash, HMAC-SHA256 under the service's
//     credential key, over the row's tenant, device and credential id and the secret. Random
//     secrets need no salt or slowness; without the key a database dump is worthless; and a
//     check costs a microsecond, so a reconnect storm of thousands of devices is cheap.
//   - client-chosen secrets (people pick guessable ones): a salted slow hash (scrypt, as user
//     passwords: src/auth/passwords.ts).
import crypto from 'node:crypto';
import { hashPassword, verifyPassword } from '../../auth/passwords.js';
import { MAX_CHOSEN_SECRET, SECRET_CHARACTERS } from '../../schemas/credentials.js';

const KEYED = 'hmac-sha256$';
const SECRET_TEXT = new RegExp(SECRET_CHARACTERS);
/**
 * Slow hashes computed at once. scrypt runs on libuv's thread pool (4 threads by default), which
 * also serves PBKDF2 of new database connections (SCRAM): a burst of client-chosen secrets must
 * not take every thread, or new connections time out behind it (seen: 32 concurrent creations
 * at a load average of 25 answered 503 "Database unavailable").
 */
const SLOW_AT_ONCE = 2;

/**
 * At most `limit` jobs run at once; the others wait in lanes (a client address, the API), served
 * in turn: a flood of slow checks from one address waits behind itself, while another lane's
 * next job runs as soon as a slot is free.
 */
class FairGate {
  private running = 0;
  /** Waiting jobs by lane; the map's order is the turn (a served lane goes to the back). */
  private readonly lanes = new Map<string, Array<() => void>>();

  constructor(private readonly limit: number) {}

  async run<T>(lane: string, job: () => Promise<T>): Promise<T> {
    // A finished job hands its slot to the next lane's first job.
    if (this.running >= this.limit) {
      await new Promise<void>((resolve) => {
        const waiting = this.lanes.get(lane);
        if (waiting) waiting.push(resolve);
        else this.lanes.set(lane, [resolve]);
      });
    } else this.running++;
    try {
      return await job();
    } finally {
      this.next();
    }
  }

  private next(): void {
    const turn = this.lanes.entries().next();
    if (turn.done) {
      this.running--;
      return;
    }
    const [lane, waiting] = turn.value;
    const resolve = waiting.shift()!;
    this.lanes.delete(lane);
    if (waiting.length > 0) this.lanes.set(lane, waiting);
    resolve();
  }
}

const slow = new FairGate(SLOW_AT_ONCE);
/** The lane of slow hashes made for the API (a client-chosen secret being stored). */
const API_LANE = 'api';

/** The row a hash belongs to: a keyed hash moved to another row no longer matches. */
export interface CredentialPlace {
  tenant: string;
  deviceId: string;
  credentialId: string;
}

/** A new generated secret: 192 random bits as URL-safe text (32 characters). */
export function generateSecret(): string {
  return crypto.randomBytes(24).toString('base64url');
}

export class CredentialHasher {
  constructor(private readonly key: Buffer) {
    if (key.length !== 32) throw new Error('the device credential key must be 32 bytes');
  }

  /** DEVICE_CREDENTIAL_KEY absent: a key of its own derived from the PSK key (HKDF-SHA256), so no second secret is needed. */
  static derivedFrom(pskKey: Buffer): CredentialHasher {
    return new CredentialHasher(Buffer.from(crypto.hkdfSync('sha256', pskKey, Buffer.alloc(0), 'device-registry device credentials', 32)));
  }

  /** The stored form of a generated secret. */
  keyed(place: CredentialPlace, secret: string): string {
    return KEYED + this.mac(place, secret).toString('base64');
  }

  /** The stored form of a client-chosen secret. */
  salted(secret: string): Promise<string> {
    return slow.run(API_LANE, () => hashPassword(secret));
  }

  /** Whether checking this stored hash is fast (keyed) or slow (scrypt). */
  isKeyed(stored: string): boolean {
    return stored.startsWith(KEYED);
  }

  /** True when `secret` is the secret `stored` was made from; a slow check waits its turn in `lane` (the client's address). */
  async matches(stored: string, place: CredentialPlace, secret: string, lane = ''): Promise<boolean> {
    // What no secret can be is wrong without a hash: scrypt keys an HMAC with the password, which
    // pads it with zero bytes, so the secret with NULs after it matched (found by a review).
    if (secret.length > MAX_CHOSEN_SECRET || !SECRET_TEXT.test(secret)) return false;
    if (this.isKeyed(stored)) {
      const expected = Buffer.from(stored.slice(KEYED.length), 'base64');
      const actual = this.mac(place, secret);
      return expected.length === actual.length && crypto.timingSafeEqual(expected, actual);
    }
    return slow.run(`a:${lane}`, () => verifyPassword(secret, stored)).catch(() => false);
  }

  /**
   * A keyed digest of a secret that was checked against a slow hash, kept in memory only, so a
   * device with a client-chosen secret pays scrypt once per process, not at every reconnect.
   */
  remembered(place: CredentialPlace, secret: string): Buffer {
    return this.mac(place, '\u0000verified\u0000' + secret);
  }

  private mac(place: CredentialPlace, secret: string): Buffer {
    return crypto
      .createHmac('sha256', this.key)
      .update(JSON.stringify([place.tenant, place.deviceId, place.credentialId]))
      .update('\u0000')
      .update(secret, 'utf8')
      .digest();
  }
}
