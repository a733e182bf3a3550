// Device logins (docs/credentials.md): the one place that decides whether a client may log in
// to a broker as a device, for every broker the service serves: the embedded broker (which asks
// from its thread, src/ingest/login-bridge.ts) and external brokers calling the internal
// listener (src/http/broker-auth-routes.ts). MQTT_DEVICE_AUTH sets the rule:
//   required  the device must exist and present a valid, unexpired credential;
//   optional  the same for a device that has credentials; one without any logs in as before;
//   off       the device must exist.
// A client certificate verified for the device (CN `<tenant>:<device_id>`) is a credential.
// Devices and their credentials are cached (registry events drop them, and no record is used
// longer than REGISTRY_CACHE_MAX_AGE_SECONDS after its read, should an event be missed); lookups
// made at the same moment share one query, so a storm of logins costs a few queries, not one each.
// Secrets are compared, never kept (a keyed digest of a slow-hashed one is, in memory only).
import type pg from 'pg';
import type { DeviceAuthMode } from '../../config.js';
import type { Logger } from '../../log.js';
import type { DeviceRef } from '../../topics.js';
import type { RegistryEvent } from '../events.js';
import type { CredentialHasher } from './hashing.js';
import type { LoginMetrics } from './metrics.js';
import type { LoginRefusal } from './refusals.js';
import * as repo from './repo.js';
import { LoginThrottle } from './throttle.js';

/** What a client presented. */
export interface DeviceLogin {
  /** The device it names (username, client id, certificate); absent: not known yet (a legacy client, named later by its first topic). */
  device?: DeviceRef;
  /** The MQTT password. */
  password?: Uint8Array;
  /** The broker verified a client certificate naming this device. */
  certificate?: boolean;
  /** The client's address (throttling, logs). */
  address?: string;
  /** The HTTP request that asks (a broker's hook on the internal listener): its log lines carry it. */
  requestId?: string;
  /**
   * The connection is refused whatever the verdict (an MQTT 5 client of the embedded broker,
   * which speaks 3.1.1): the verdict only chooses its answer, so an acceptance is neither
   * counted nor recorded as the credential's use.
   */
  answerOnly?: boolean;
  /**
   * The broker has a last word (the embedded broker refuses a login whose credential or device
   * was removed while it was checked): an acceptance is counted and recorded as the credential's
   * use only when the broker settles it (LoginCheck.settle).
   */
  settledLater?: boolean;
}

export type LoginVerdict =
  /** `credentialId`: the credential it logged in with (closed with it); `expiresMs`: when that credential expires. */
  { ok: true; credentialId?: string; expiresMs?: number } | { ok: false; reason: LoginRefusal };

/** A login accepted earlier, still connected: what it was accepted with (never its secret). */
export interface AcceptedLogin {
  device: DeviceRef;
  /** The credential it matched. */
  credentialId?: string;
  /** Accepted without any credential (optional mode: its device had none; off: none asked). */
  bare: boolean;
}

/** See LoginCheck.standing. */
export type LoginStanding = 'holds' | 'lapsed' | 'device_removed';

/** How a broker asks. */
export interface LoginCheck {
  check(login: DeviceLogin): Promise<LoginVerdict>;
  /**
   * What became of each login accepted earlier, by what the registry holds now: `holds` (its
   * device exists, the credential it matched exists and has not expired, and with `optional` a
   * login without one is of a device that still has none), `lapsed` (it no longer does), or
   * `device_removed`. Asked after registry events were missed, when no event tells which
   * connections a deletion ended.
   */
  standing(logins: AcceptedLogin[]): Promise<LoginStanding[]>;
  /** A login accepted by `check` with `settledLater`: what the broker made of it, accepted or refused (counted then). */
  settle(device: DeviceRef, certificate: boolean, outcome: LoginVerdict): void;
}

export interface DeviceLoginsOptions {
  pool: pg.Pool;
  hasher: CredentialHasher;
  /** MQTT_DEVICE_AUTH. */
  mode: DeviceAuthMode;
  metrics: LoginMetrics;
  log: Logger;
  /** REGISTRY_CACHE_MAX_AGE_SECONDS in ms: a record missed by its event (another instance's) is read again past it. */
  maxAgeMs: number;
}

const RECORD_CAPACITY = 500_000;
const REMEMBERED_CAPACITY = 100_000;
const LOAD_BATCH = 1000;
const LAST_USED_FLUSH_MS = 2000;

type Record = repo.StoredCredential[] | null;

interface Cached {
  record: Record;
  /** Date.now() when its read started: it holds every change committed before. */
  readAt: number;
}

interface Waiting {
  tenant: string;
  deviceId: string;
  key: string;
  resolve(r: Record): void;
  reject(err: unknown): void;
  /** The lookup's promise: `loading` holds it until it ends, unless an event dropped it. */
  loaded(): Promise<Record>;
}

export class DeviceLogins implements LoginCheck {
  private readonly records = new Map<string, Cached>();
  private readonly loading = new Map<string, Promise<Record>>();
  private queue: Waiting[] = [];
  private generation = 0;
  private readonly throttle = new LoginThrottle();
  /** Slow-hashed secrets already checked: credential id -> keyed digest. */
  private readonly remembered = new Map<string, Buffer>();
  /** Slow checks under way, by credential id and digest: a device reconnecting meanwhile waits for the same one. */
  private readonly slowChecks = new Map<string, Promise<boolean>>();
  private readonly used = new Map<string, { tenant: string; deviceId: string; id: string }>();
  private readonly usedTimer: NodeJS.Timeout;
  private readonly pool: pg.Pool;
  private readonly hasher: CredentialHasher;
  readonly mode: DeviceAuthMode;
  private readonly metrics: LoginMetrics;
  private readonly log: Logger;
  private readonly maxAgeMs: number;

  constructor({ pool, hasher, mode, metrics, log, maxAgeMs }: DeviceLoginsOptions) {
    this.pool = pool;
    this.hasher = hasher;
    this.mode = mode;
    this.metrics = metrics;
    this.log = log;
    this.maxAgeMs = maxAgeMs;
    this.usedTimer = setInterval(() => void this.flushUsed(), LAST_USED_FLUSH_MS);
    this.usedTimer.unref();
  }

  async check(login: DeviceLogin): Promise<LoginVerdict> {
    const device = login.device;
    if (!device) {
      // Not named yet: a legacy client, checked again once its first topic names the device.
      if (this.mode === 'required' && !login.password?.length && !login.certificate) return this.refuse(login, 'no_credential');
      return { ok: true };
    }
    const guarded = this.mode !== 'off' && !login.certificate && (this.mode === 'required' || (await this.hasCredentials(device)));
    const keys = guarded ? [`u:${device.tenant}:${device.id}`, `a:${login.address ?? ''}`] : [];
    let verdict: LoginVerdict;
    if (guarded) {
      const delay = this.throttle.delayFor(keys);
      if (delay === undefined) return this.refuse(login, 'throttled');
      this.throttle.begin(keys);
      try {
        if (delay > 0) await this.throttle.wait(keys, delay);
        verdict = await this.decide(device, login);
      } finally {
        this.throttle.end(keys);
      }
    } else {
      verdict = await this.decide(device, login);
    }
    if (verdict.ok) {
      if (guarded) this.throttle.succeeded(keys[0]!);
      if (login.answerOnly || login.settledLater) return verdict;
      this.settle(device, login.certificate === true, verdict);
      return verdict;
    }
    if (guarded) this.throttle.failed(keys);
    return this.refuse(login, verdict.reason);
  }

  settle(device: DeviceRef, certificate: boolean, outcome: LoginVerdict): void {
    if (!outcome.ok) return this.metrics.refused(outcome.reason);
    this.metrics.accepted(certificate ? 'certificate' : outcome.credentialId ? 'password' : 'none');
    if (outcome.credentialId) this.used.set(outcome.credentialId, { tenant: device.tenant, deviceId: device.id, id: outcome.credentialId });
  }

  async standing(logins: AcceptedLogin[]): Promise<LoginStanding[]> {
    const records = await Promise.all(logins.map((l) => this.load(l.device.tenant, l.device.id)));
    const now = Date.now();
    return logins.map((l, i) => {
      const credentials = records[i]!;
      if (credentials === null) return 'device_removed';
      let holds: boolean;
      if (l.credentialId !== undefined) {
        const c = credentials.find((x) => x.id === l.credentialId);
        holds = c !== undefined && (c.expiresMs === null || c.expiresMs > now);
      } else {
        // A client certificate (neither bare nor a credential) holds while its device exists.
        holds = !l.bare || this.mode === 'off' || (this.mode === 'optional' && credentials.length === 0);
      }
      return holds ? 'holds' : 'lapsed';
    });
  }

  /**
   * Registry events: drop what they make stale. A lookup under way is neither cached nor shared
   * with later logins (it may have read the registry before the change: a login checked after
   * a credential's deletion must not be accepted with it).
   */
  invalidate(event: RegistryEvent): void {
    this.generation++;
    const drop = (key: string) => {
      this.records.delete(key);
      this.loading.delete(key);
    };
    switch (event.type) {
      case 'devices.changed':
      case 'devices.removed':
        for (const id of event.deviceIds) drop(repo.recordKey(event.tenant, id));
        break;
      case 'credentials.changed':
        drop(repo.recordKey(event.tenant, event.deviceId));
        for (const id of event.removedIds) this.remembered.delete(id);
        break;
      case 'tenant.changed':
        for (const map of [this.records, this.loading])
          for (const key of map.keys()) if (event.tenant === '*' || key.startsWith(repo.recordKey(event.tenant, ''))) map.delete(key);
        break;
    }
  }

  /** Writes the last logins and stops. */
  async stop(): Promise<void> {
    clearInterval(this.usedTimer);
    await this.flushUsed();
  }

  /**
   * Optional mode throttles only the logins of devices that have credentials: a device without
   * any logs in by its name alone (the contract's login), so there is nothing to guess, and
   * failures of names without a device (one tried before it was created, or many behind one
   * NAT) must not slow it.
   */
  private async hasCredentials(device: DeviceRef): Promise<boolean> {
    const credentials = await this.load(device.tenant, device.id);
    return credentials !== null && credentials.length > 0;
  }

  private async decide(device: DeviceRef, login: DeviceLogin): Promise<LoginVerdict> {
    const credentials = await this.load(device.tenant, device.id);
    if (credentials === null) return { ok: false, reason: 'unknown_device' };
    if (this.mode === 'off' || login.certificate) return { ok: true };
    if (credentials.length === 0) return this.mode === 'required' ? { ok: false, reason: 'no_credential' } : { ok: true };
    if (!login.password?.length) return { ok: false, reason: 'no_credential' };
    const secret = Buffer.from(login.password).toString('utf8');
    const now = Date.now();
    let expiredMatch = false;
    // Keyed hashes first: a microsecond each. A slow hash only when none of them matched.
    const ordered = [...credentials].sort((a, b) => Number(this.hasher.isKeyed(b.secretHash)) - Number(this.hasher.isKeyed(a.secretHash)));
    for (const c of ordered) {
      if (!(await this.matches(device, c, secret, login.address ?? ''))) continue;
      if (c.expiresMs !== null && c.expiresMs <= now) {
        expiredMatch = true;
        continue;
      }
      return { ok: true, credentialId: c.id, ...(c.expiresMs !== null ? { expiresMs: c.expiresMs } : {}) };
    }
    return { ok: false, reason: expiredMatch ? 'expired' : 'wrong' };
  }

  private async matches(device: DeviceRef, c: repo.StoredCredential, secret: string, address: string): Promise<boolean> {
    const place = { tenant: device.tenant, deviceId: device.id, credentialId: c.id };
    if (this.hasher.isKeyed(c.secretHash)) return this.hasher.matches(c.secretHash, place, secret);
    const digest = this.hasher.remembered(place, secret);
    if (this.remembered.get(c.id)?.equals(digest)) return true;
    const key = c.id + ':' + digest.toString('base64');
    let check = this.slowChecks.get(key);
    if (!check) {
      check = this.hasher.matches(c.secretHash, place, secret, address).then((ok) => {
        this.slowChecks.delete(key);
        if (ok) {
          if (this.remembered.size >= REMEMBERED_CAPACITY) this.remembered.clear();
          this.remembered.set(c.id, digest);
        }
        return ok;
      });
      this.slowChecks.set(key, check);
    }
    return check;
  }

  private refuse(login: DeviceLogin, reason: LoginRefusal): LoginVerdict {
    this.metrics.refused(reason);
    // Never the password: what was presented is named, not shown.
    this.log.info('device login refused', {
      tenant: login.device?.tenant,
      device: login.device?.id,
      reason,
      address: login.address,
      presented: login.certificate ? 'certificate' : login.password?.length ? 'password' : 'nothing',
      ...(login.requestId ? { requestId: login.requestId } : {}),
    });
    return { ok: false, reason };
  }

  /** The device's credentials (null: no such device), cached; concurrent lookups share one query. */
  private load(tenant: string, deviceId: string): Promise<Record> {
    const key = repo.recordKey(tenant, deviceId);
    const hit = this.records.get(key);
    if (hit !== undefined && Date.now() - hit.readAt <= this.maxAgeMs) return Promise.resolve(hit.record);
    let p = this.loading.get(key);
    if (!p) {
      const loaded = new Promise<Record>((resolve, reject) => {
        if (this.queue.length === 0) setImmediate(() => void this.loadQueued());
        this.queue.push({ tenant, deviceId, key, resolve, reject, loaded: () => loaded });
      });
      this.loading.set(key, (p = loaded));
    }
    return p;
  }

  private async loadQueued(): Promise<void> {
    const queued = this.queue;
    this.queue = [];
    for (let i = 0; i < queued.length; i += LOAD_BATCH) {
      const batch = queued.slice(i, i + LOAD_BATCH);
      const gen = this.generation;
      const readAt = Date.now();
      try {
        const found = await repo.loginRecords(this.pool, batch);
        for (const w of batch) {
          const record = found.get(w.key) ?? null;
          this.lookupEnded(w);
          if (gen === this.generation) {
            // Re-read records go to the back: the map's order stays the order of age.
            this.records.delete(w.key);
            if (this.records.size >= RECORD_CAPACITY) this.records.delete(this.records.keys().next().value!);
            this.records.set(w.key, { record, readAt });
          }
          w.resolve(record);
        }
      } catch (err) {
        for (const w of batch) {
          this.lookupEnded(w);
          w.reject(err);
        }
      }
    }
  }

  /** Its lookup is no longer shared (unless an event dropped it already, and a newer one is). */
  private lookupEnded(w: Waiting): void {
    if (this.loading.get(w.key) === w.loaded()) this.loading.delete(w.key);
  }

  private async flushUsed(): Promise<void> {
    if (this.used.size === 0) return;
    const batch = [...this.used.values()];
    this.used.clear();
    await repo.touch(this.pool, batch).catch((err: Error) => this.log.warn('could not record credential use', { error: err.message }));
  }
}
