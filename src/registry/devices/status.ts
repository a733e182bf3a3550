// Device status (docs/live.md): when each device's last stored message was received
// (`last_seen`), and whether that is recent enough for the device to be `online`. Kept in memory
// (this instance's commits and, through the live fan-out, every other instance's), written to
// `device_status` in batches (one statement per DEVICE_STATUS_FLUSH_MS, the newest time wins),
// and read back at start, so a restart keeps it. A device is offline once its last message is
// older than its inactivity timeout: the largest `offline_after` of its templates, else
// DEVICE_OFFLINE_AFTER_SECONDS. Status changes are told to listeners (the live stream): to
// online when a message arrives, either way by a sweep once a second (a timeout that ran out)
// or right after a registry change (a timeout that changed with the device's templates; until
// it is read again, the one read before holds).
import type pg from 'pg';
import type { Logger } from '../../log.js';
import { microsToRegistryTime } from '../../time.js';
import type { RegistryEvent, RegistryEvents } from '../events.js';

export type DeviceStatus = 'online' | 'offline';

export interface StatusChange {
  tenant: string;
  deviceId: string;
  status: DeviceStatus;
  /** registry time text, or null (never seen). */
  lastSeen: string | null;
}

export interface StatusOptions {
  offlineAfterSeconds: number;
  flushMs: number;
  log: Logger;
}

interface Entry {
  tenant: string;
  id: string;
  /** µs since the epoch. */
  lastSeenUs: number;
  /** Seconds; undefined until read from the device's templates. */
  timeoutS: number | undefined;
  /**
   * Registry changes that may have changed its timeout (`changes`), and how many of them the
   * timeout read last had seen (`readAt`): while they differ it is read again, and meanwhile the
   * last value read holds (not the default). A read that fails, or that a later change overtook,
   * sets nothing.
   */
  changes: number;
  readAt: number;
  online: boolean;
}

const key = (tenant: string, id: string) => `${tenant}\u0000${id}`;

/**
 * How long a removed device's later commits are ignored: messages translated before its removal
 * may still be committed after it (ingest's batches, another instance's fan-out), and took the
 * device back into the book (a `status` `online` after its `device` `removed` message, an
 * `offline` one a timeout later, and an entry kept for good).
 */
const REMOVED_FOR_MS = 60_000;
/** The shortest inactivity timeout there can be (offline_after and DEVICE_OFFLINE_AFTER_SECONDS are at least 1 s). */
const SHORTEST_TIMEOUT_US = 1_000_000;

export class DeviceStatusBook {
  private readonly entries = new Map<string, Entry>();
  /** Devices removed within REMOVED_FOR_MS (key → Date.now() at the removal): their late commits are not taken. */
  private readonly removed = new Map<string, number>();
  /** Entries whose last_seen is not written yet. */
  private dirty = new Set<Entry>();
  private readonly listeners = new Set<(c: StatusChange) => void>();
  private timer: NodeJS.Timeout | undefined;
  private flushing: Promise<void> | undefined;
  /** The write queued behind the one in flight (flush). */
  private flushAfter: Promise<void> | undefined;
  private stopped = false;
  private refreshing = false;
  /** When writing began to fail (undefined: it works), so that an outage is logged once. */
  private failingSince: number | undefined;

  constructor(
    private readonly pool: pg.Pool,
    /** Only listened to: the book hears each registry change. */
    events: Pick<RegistryEvents, 'on'>,
    private readonly opts: StatusOptions,
  ) {
    events.on((e) => this.registryChanged(e));
  }

  /** DEVICE_OFFLINE_AFTER_SECONDS: the timeout of a device whose templates set none. */
  get offlineAfterSeconds(): number {
    return this.opts.offlineAfterSeconds;
  }

  /** Reads every stored last_seen and starts the batch writer and the offline sweep. */
  async start(): Promise<void> {
    const rows = await this.stored();
    for (const r of rows) {
      this.entries.set(key(r.tenant, r.device_id), {
        tenant: r.tenant,
        id: r.device_id,
        lastSeenUs: Number(r.us),
        timeoutS: undefined,
        changes: 0,
        readAt: 0,
        online: false,
      });
    }
    await this.resolveTimeouts();
    const now = Date.now() * 1000;
    for (const e of this.entries.values()) e.online = this.isOnline(e, now);
    this.timer = setInterval(() => void this.tick(), this.opts.flushMs);
    this.timer.unref();
  }

  /**
   * Reads the stored last_seen times again and takes those newer than memory's: called when the
   * live fan-out's listening connection is back after a loss, since the other instances' commits
   * of the meantime were never heard (their devices kept an old last_seen, or none, here, while
   * the status filter, which reads the table, listed them online). Read at once, again when each
   * other instance answers that it has written what it held (readAgain), and two flush periods
   * later for instances of an earlier version, which do not answer.
   */
  resync(): void {
    this.readAgain();
    // (the other instances also answer once they have written: readAgain; this read is for those of an earlier version)
    setTimeout(() => this.readAgain(), 2 * this.opts.flushMs + 500).unref();
  }

  /** Reads the stored last_seen times once more (another instance has written what it held: docs/live.md §4). */
  readAgain(): void {
    if (this.stopped) return;
    this.reread().catch((err: Error) => this.opts.log.warn('could not read device status again', { error: err.message }));
  }

  /**
   * The changes are told by the sweep once the new entries' timeouts are read: before (found by
   * an audit), a device first seen here this way was judged by the default timeout, and one whose
   * template's shorter one had run out was told `online`, then `offline` right after.
   */
  private async reread(): Promise<void> {
    const rows = await this.stored();
    for (const r of rows) {
      const us = Number(r.us);
      const k = key(r.tenant, r.device_id);
      if (this.removed.has(k)) continue;
      const e = this.entries.get(k);
      // (already stored: not dirty)
      if (!e) {
        this.entries.set(k, {
          tenant: r.tenant,
          id: r.device_id,
          lastSeenUs: us,
          timeoutS: undefined,
          changes: 0,
          readAt: 0,
          online: false,
        });
      } else if (us > e.lastSeenUs) {
        e.lastSeenUs = us;
      }
    }
    await this.resolveTimeouts();
    this.sweep();
  }

  private async stored(): Promise<{ tenant: string; device_id: string; us: string }[]> {
    const { rows } = await this.pool.query<{ tenant: string; device_id: string; us: string }>(
      `SELECT tenant, device_id, (extract(epoch FROM last_seen) * 1000000)::bigint::text AS us FROM device_status`,
    );
    return rows;
  }

  onChange(listener: (c: StatusChange) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** A stored message of the device, received at `receivedUs`. */
  seen(tenant: string, id: string, receivedUs: number): void {
    const k = key(tenant, id);
    if (this.removed.has(k)) return;
    let e = this.entries.get(k);
    if (!e) {
      e = { tenant, id, lastSeenUs: receivedUs, timeoutS: undefined, changes: 0, readAt: 0, online: false };
      this.entries.set(k, e);
    } else if (receivedUs > e.lastSeenUs) {
      e.lastSeenUs = receivedUs;
    } else {
      return;
    }
    this.dirty.add(e);
    if (e.online) return;
    const now = Date.now() * 1000;
    if (e.timeoutS === undefined && now - receivedUs >= SHORTEST_TIMEOUT_US) {
      // Its timeout is not read yet, and a short one may have run out already (a message committed
      // late, after a database outage): the sweep that follows the read tells the change, if any
      // (before, found by an audit, the default timeout told `online`, the next tick `offline`).
      this.refreshSoon();
    } else if (this.isOnline(e, now)) {
      e.online = true;
      this.emit(e);
    }
  }

  /** `last_seen` and `status` of a device view. */
  fields(tenant: string, id: string): { last_seen: string | null; status: DeviceStatus } {
    const e = this.entries.get(key(tenant, id));
    if (!e) return { last_seen: null, status: 'offline' };
    return { last_seen: microsToRegistryTime(e.lastSeenUs), status: this.isOnline(e, Date.now() * 1000) ? 'online' : 'offline' };
  }

  /** The view's JSON text with `last_seen` and `status` added at the end. */
  decorate(tenant: string, id: string, json: string): string {
    const f = this.fields(tenant, id);
    return `${json.slice(0, -1)},"last_seen":${JSON.stringify(f.last_seen)},"status":"${f.status}"}`;
  }

  /**
   * Writes what is not written yet (a status-filtered list calls it first, so the database agrees
   * with memory; so does another instance that starts listening). A write in flight took only the
   * entries dirty when it began: those dirtied since go in one more write after it.
   */
  flush(): Promise<void> {
    if (!this.flushing) return (this.flushing = this.write().finally(() => (this.flushing = undefined)));
    return (this.flushAfter ??= this.flushing
      .catch(() => undefined)
      .then(() => {
        this.flushAfter = undefined;
        return this.flush();
      }));
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearInterval(this.timer);
    await this.flush().catch((err: Error) => this.opts.log.warn('could not write the last device status', { error: err.message }));
  }

  private async tick(): Promise<void> {
    if (this.stopped) return;
    const forgetBefore = Date.now() - REMOVED_FOR_MS;
    for (const [k, at] of this.removed) {
      if (at >= forgetBefore) break; // (in order of removal)
      this.removed.delete(k);
    }
    try {
      await this.flush();
      await this.resolveTimeouts();
      if (this.failingSince !== undefined) {
        this.opts.log.info('device status written again', { failedForMs: Date.now() - this.failingSince });
        this.failingSince = undefined;
      }
    } catch (err) {
      // Once per outage, not at every tick (every DEVICE_STATUS_FLUSH_MS: an hour without the
      // database would be thousands of lines); the retries meanwhile at debug.
      if (this.failingSince === undefined) {
        this.failingSince = Date.now();
        this.opts.log.warn('could not write device status; trying again until the database answers', { error: (err as Error).message });
      } else {
        this.opts.log.debug('could not write device status; trying again', { error: (err as Error).message });
      }
    }
    this.sweep();
  }

  /**
   * Online devices whose timeout ran out become offline; offline devices whose timeout grew
   * past their last message's age (a template's `offline_after` raised) become online again.
   */
  private sweep(): void {
    const now = Date.now() * 1000;
    for (const e of this.entries.values()) {
      const online = this.isOnline(e, now);
      if (online !== e.online) {
        e.online = online;
        this.emit(e);
      }
    }
  }

  private isOnline(e: Entry, nowUs: number): boolean {
    return nowUs - e.lastSeenUs < (e.timeoutS ?? this.opts.offlineAfterSeconds) * 1_000_000;
  }

  private emit(e: Entry): void {
    const change: StatusChange = {
      tenant: e.tenant,
      deviceId: e.id,
      status: e.online ? 'online' : 'offline',
      lastSeen: microsToRegistryTime(e.lastSeenUs),
    };
    for (const l of this.listeners) {
      try {
        l(change);
      } catch (err) {
        this.opts.log.error('device status listener failed', { error: err as Error });
      }
    }
  }

  /**
   * One statement for every dirty entry; a device removed meanwhile is skipped (the join). The
   * devices are locked FOR KEY SHARE, in the order the deletions lock them (tenant, id): a device
   * whose removal commits while the write waits for it is skipped too. Before (found by an audit),
   * the foreign key's own check, made after the join had seen the device, failed the whole
   * statement ("violates foreign key constraint"): a status-filtered list, which writes first,
   * answered 500, and the sweep logged the database as unreachable.
   */
  private async write(): Promise<void> {
    if (this.dirty.size === 0) return;
    const batch = [...this.dirty];
    this.dirty = new Set();
    try {
      await this.pool.query(
        `INSERT INTO device_status (tenant, device_id, last_seen)
         SELECT u.tenant, u.id, to_timestamp(u.us / 1000000.0)
           FROM unnest($1::text[], $2::text[], $3::float8[]) AS u(tenant, id, us)
           JOIN devices d ON d.tenant = u.tenant AND d.id = u.id
          ORDER BY d.tenant, d.id
            FOR KEY SHARE OF d
         ON CONFLICT (tenant, device_id) DO UPDATE SET last_seen = GREATEST(device_status.last_seen, EXCLUDED.last_seen)`,
        [batch.map((e) => e.tenant), batch.map((e) => e.id), batch.map((e) => e.lastSeenUs)],
      );
    } catch (err) {
      for (const e of batch) this.dirty.add(e); // written next time
      throw err;
    }
  }

  /**
   * Reads the timeout of entries that do not know theirs (new, or their templates changed). An
   * entry whose device is gone is forgotten, without a status change: its removal was not heard
   * (another instance's, while the registry events' listening connection was down: only a
   * `tenant.changed` tells of that gap), and it kept the old device's last_seen for an id given
   * again and told a `status` `offline` of a removed device.
   */
  private async resolveTimeouts(): Promise<void> {
    const open = [...this.entries.values()].filter((e) => e.timeoutS === undefined || e.readAt !== e.changes);
    if (open.length === 0) return;
    const asOf = new Map(open.map((e) => [e, e.changes]));
    const { rows } = await this.pool.query<{ tenant: string; id: string; secs: number | null; present: boolean }>(
      `SELECT u.tenant, u.id, (SELECT max(t.offline_after) FROM device_templates dt
                                 JOIN templates t ON t.tenant = dt.tenant AND t.id = dt.template_id
                                WHERE dt.tenant = u.tenant AND dt.device_id = u.id) AS secs,
              EXISTS (SELECT 1 FROM devices d WHERE d.tenant = u.tenant AND d.id = u.id) AS present
         FROM unnest($1::text[], $2::text[]) AS u(tenant, id)`,
      [open.map((e) => e.tenant), open.map((e) => e.id)],
    );
    for (const r of rows) {
      const k = key(r.tenant, r.id);
      const e = this.entries.get(k);
      const seen = e && asOf.get(e);
      if (!e || seen !== e.changes) continue;
      if (!r.present) {
        this.entries.delete(k);
        this.dirty.delete(e);
        continue;
      }
      e.timeoutS = r.secs ?? this.opts.offlineAfterSeconds;
      e.readAt = seen;
    }
  }

  /** Timeouts a change made stale are read again now (not at the next tick), and the statuses that follow told. */
  private refreshSoon(): void {
    if (this.refreshing || this.stopped) return;
    this.refreshing = true;
    setImmediate(() => {
      this.refreshing = false;
      this.resolveTimeouts().then(
        () => this.sweep(),
        () => undefined, // the next tick tries again
      );
    });
  }

  /** Removed devices are forgotten (and their late commits ignored for a while); devices whose templates may have changed read their timeout again. */
  private registryChanged(e: RegistryEvent): void {
    switch (e.type) {
      case 'devices.removed':
        for (const id of e.deviceIds) {
          const entry = this.entries.get(key(e.tenant, id));
          if (entry) this.dirty.delete(entry);
          this.entries.delete(key(e.tenant, id));
          this.removed.delete(key(e.tenant, id)); // (the map stays in order of removal)
          this.removed.set(key(e.tenant, id), Date.now());
        }
        break;
      case 'devices.changed':
        for (const id of e.deviceIds) {
          if (e.action === 'created') this.removed.delete(key(e.tenant, id)); // an id given again
          const entry = this.entries.get(key(e.tenant, id));
          if (entry) entry.changes++;
        }
        this.refreshSoon();
        break;
      case 'templates.changed':
      case 'tenant.changed':
        for (const entry of this.entries.values()) if (e.tenant === '*' || entry.tenant === e.tenant) entry.changes++;
        this.refreshSoon();
        break;
      default:
        break;
    }
  }
}

/**
 * SQL condition on `devices d`: the device is online (its stored last_seen within its timeout)
 * at `nowSql`, the service's clock as the views use it (isOnline), not the database's now():
 * where the two clocks differ, the filter and the views would disagree.
 */
export function onlineSql(defaultSecondsParam: string, nowSql: string): string {
  return `EXISTS (SELECT 1 FROM device_status s WHERE s.tenant = d.tenant AND s.device_id = d.id
    AND s.last_seen > ${nowSql} - make_interval(secs => COALESCE((SELECT max(t.offline_after) FROM device_templates dt
      JOIN templates t ON t.tenant = dt.tenant AND t.id = dt.template_id WHERE dt.tenant = d.tenant AND dt.device_id = d.id), ${defaultSecondsParam})))`;
}
