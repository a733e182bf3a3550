// Failed logins slow their guesser down, not the service (docs/credentials.md). Failures are
// counted per key (a device name, a client address); past its free failures (a few for a device
// name; more for an address, which a gateway or a NAT shares between many devices), each
// further attempt by that key waits before it is checked, twice as long after every failure,
// up to MAX_DELAY_MS. An attempt under way for a device name counts as a failure of that name
// until it succeeds (a device has one login at a time; a burst of parallel guesses must not all
// get in free before the first of them has failed). The wait costs the service a timer; a key
// with MAX_WAITING attempts already waiting is refused at once, unchecked, except that a device
// name's full queue does not refuse an attempt from a clean address (one that has never failed
// and has no other attempt under way): a guesser flooding one name must not keep its device out
// (that attempt waits like the others). A success forgives the device name, not the address (an
// address with one good credential could otherwise reset itself between guesses).
// Counts are forgotten FORGET_MS after a key's last failure.

/** Failures without a wait: per key kind, by the key's prefix (`u:` device name, `a:` address). */
const FREE_FAILURES = { u: 3, a: 30 } as const;
const BASE_DELAY_MS = 500;
/** The longest wait before a check (the HTTP hooks' brokers must wait longer for an answer: docs/operations.md §7). */
export const MAX_DELAY_MS = 8000;
const MAX_WAITING = 16;
const FORGET_MS = 15 * 60_000;
const CAPACITY = 100_000;

const freeFailures = (key: string) => (key.startsWith('a:') ? FREE_FAILURES.a : FREE_FAILURES.u);

interface Entry {
  failures: number;
  lastFailure: number;
  waiting: number;
  /** Attempts by this key between `begin` and `end`. */
  underWay: number;
}

const idle = (e: Entry) => e.waiting === 0 && e.underWay === 0;

export class LoginThrottle {
  private readonly entries = new Map<string, Entry>();

  constructor(private readonly now: () => number = Date.now) {}

  /** The wait before an attempt by these keys is checked (ms); undefined: refuse it unchecked. */
  delayFor(keys: readonly string[]): number | undefined {
    const cleanAddress = keys.some((k) => {
      const e = k.startsWith('a:') ? this.current(k) : undefined;
      return k.startsWith('a:') && (!e || (e.failures === 0 && e.underWay === 0));
    });
    let delay = 0;
    for (const key of keys) {
      const e = this.current(key);
      const free = freeFailures(key);
      // A device name's attempts under way count as failures until they succeed; an address's
      // do not (a NAT's devices log in at once).
      const failures = e ? e.failures + (key.startsWith('u:') ? e.underWay : 0) : 0;
      if (!e || failures < free) continue;
      if (e.waiting >= MAX_WAITING && !(cleanAddress && key.startsWith('u:'))) return undefined;
      delay = Math.max(delay, Math.min(MAX_DELAY_MS, BASE_DELAY_MS * 2 ** Math.min(16, failures - free)));
    }
    return delay;
  }

  /** An attempt by these keys is under way (its wait and its check), until `end`. */
  begin(keys: readonly string[]): void {
    for (const key of keys) this.entry(key, this.now()).underWay++;
  }

  end(keys: readonly string[]): void {
    for (const key of keys) {
      const e = this.entries.get(key);
      if (!e) continue;
      e.underWay--;
      if (idle(e) && e.failures === 0) this.entries.delete(key);
    }
  }

  /** Waits `delayFor(keys)` (counted as waiting), then resolves. */
  async wait(keys: readonly string[], ms: number): Promise<void> {
    const entries = keys.map((k) => this.entries.get(k)).filter((e): e is Entry => e !== undefined);
    for (const e of entries) e.waiting++;
    try {
      await new Promise((resolve) => setTimeout(resolve, ms).unref());
    } finally {
      for (const e of entries) e.waiting--;
    }
  }

  failed(keys: readonly string[]): void {
    const now = this.now();
    for (const key of keys) {
      const e = this.entry(key, now);
      e.failures++;
      e.lastFailure = now;
    }
  }

  succeeded(key: string): void {
    const e = this.entries.get(key);
    if (e && idle(e)) this.entries.delete(key);
    else if (e) e.failures = 0;
  }

  private entry(key: string, now: number): Entry {
    let e = this.current(key);
    if (!e) {
      if (this.entries.size >= CAPACITY) this.forgetOld(now);
      this.entries.set(key, (e = { failures: 0, lastFailure: now, waiting: 0, underWay: 0 }));
    }
    return e;
  }

  private current(key: string): Entry | undefined {
    const e = this.entries.get(key);
    if (e && idle(e) && this.now() - e.lastFailure > FORGET_MS) {
      this.entries.delete(key);
      return undefined;
    }
    return e;
  }

  /** At capacity: drop forgotten entries, then the oldest half. */
  private forgetOld(now: number): void {
    for (const [key, e] of this.entries) if (idle(e) && now - e.lastFailure > FORGET_MS) this.entries.delete(key);
    if (this.entries.size < CAPACITY) return;
    let drop = this.entries.size / 2;
    for (const [key, e] of this.entries) {
      if (drop-- <= 0) break;
      if (idle(e)) this.entries.delete(key);
    }
  }
}
