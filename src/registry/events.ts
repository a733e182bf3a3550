// Registry change events. Every registry change is made through `change`, which announces it
// twice: to other service instances by PostgreSQL NOTIFY inside the change's own transaction
// (PostgreSQL delivers a notification when its transaction commits, and never otherwise, so a
// committed change cannot go unannounced), and, once committed, to this process: the HTTP
// caches in this thread, the ingest threads through a BroadcastChannel. Other instances hear the
// NOTIFY on a listening connection that is watched: when it is lost, or stops answering, it is
// opened again and every cache of this process is dropped (notifications sent meanwhile are not
// replayed). Caches also bound the age of their entries (REGISTRY_CACHE_MAX_AGE_SECONDS), the
// last resort should a notification be missed all the same. An event names what changed,
// never a secret.
import crypto from 'node:crypto';
import { BroadcastChannel } from 'node:worker_threads';
import pg from 'pg';
import { inTransaction } from '../db/pool.js';
import { SESSION_OPTIONS } from '../db/limits.js';
import type { Logger } from '../log.js';

export type RegistryEvent =
  /**
   * Devices created or changed (label, templates, overrides, keys); `action` and `templateIds`
   * (the templates these devices are built from once changed, the same for all of them) for the
   * live stream's template filters.
   */
  | { type: 'devices.changed'; tenant: string; deviceIds: string[]; action?: 'created' | 'updated'; templateIds?: number[] }
  /** Devices removed: caches drop them and their MQTT sessions are closed. */
  | { type: 'devices.removed'; tenant: string; deviceIds: string[] }
  /** Templates changed or removed: every device built from them changed too. */
  | { type: 'templates.changed'; tenant: string; templateIds: number[]; action?: 'created' | 'updated' | 'removed' }
  /**
   * A device's credentials changed (one created, or `removedIds` deleted): login caches drop the
   * device; the connections that logged in with a removed credential are closed.
   */
  | { type: 'credentials.changed'; tenant: string; deviceId: string; removedIds: string[] }
  /** Anything of the tenant may have changed (when a precise event would be too large); `*`: every tenant. */
  | { type: 'tenant.changed'; tenant: string };

export type RegistryListener = (event: RegistryEvent) => void;

/** Announces, inside the change's transaction, one event of the change. */
export type Announce = (event: RegistryEvent) => Promise<void>;

/** The channel name shared by every thread of this process. */
export const REGISTRY_CHANNEL = 'device-registry:registry-events';
const NOTIFY_CHANNEL = 'registry_events';
/** The listening connection's name in pg_stat_activity. */
export const LISTEN_APPLICATION_NAME = 'device-registry-listen';
// NOTIFY payloads must stay under 8000 bytes: a larger event naming devices or templates is split (notifications),
// any other larger event degrades to a tenant-wide one (payload).
const MAX_NOTIFY_BYTES = 7000;
/** Room for the envelope around an event: `{"origin":"<uuid>","event":...}`. */
const ENVELOPE_BYTES = 64;

/** Whether `event` goes to the other instances as it is, in one notification (see `notifications` for a larger one). */
export const fitsOneNotification = (event: RegistryEvent): boolean =>
  Buffer.byteLength(JSON.stringify(event)) + ENVELOPE_BYTES <= MAX_NOTIFY_BYTES;
/**
 * The notifications that tell other instances of `event`. An event naming devices or templates
 * (`devices.removed`, `devices.changed`, `templates.changed`) too large for one goes as several,
 * each with part of the ids (and the rest of the event as it is). A tenant-wide event in its
 * place would not close removed devices' MQTT connections on the other instances' embedded
 * brokers (docs/credentials.md §3), and would tell their live stream clients `tenant` `changed`
 * where this instance's clients are told which devices or templates changed (POST
 * /device?count=1000 names ~9 kB of ids; DELETE /template of 900 templates with 8-digit ids, ~8
 * kB; found by an audit). Any other event too large goes as `tenant.changed` (`payload`).
 */
function notifications(event: RegistryEvent): RegistryEvent[] {
  if (fitsOneNotification(event)) return [event];
  switch (event.type) {
    case 'devices.removed':
    case 'devices.changed':
      return split(event.deviceIds, (deviceIds) => ({ ...event, deviceIds }));
    case 'templates.changed':
      return split(event.templateIds, (templateIds) => ({ ...event, templateIds }));
    default:
      return [event];
  }
}

/** `ids` cut in parts whose events (`withIds`) each fit one notification. */
function split<I extends string | number>(ids: readonly I[], withIds: (ids: I[]) => RegistryEvent): RegistryEvent[] {
  const parts: RegistryEvent[] = [];
  const room = MAX_NOTIFY_BYTES - ENVELOPE_BYTES - Buffer.byteLength(JSON.stringify(withIds([])));
  let part: I[] = [];
  let bytes = 0;
  for (const id of ids) {
    const size = Buffer.byteLength(JSON.stringify(id)) + 1;
    if (part.length > 0 && bytes + size > room) {
      parts.push(withIds(part));
      part = [];
      bytes = 0;
    }
    part.push(id);
    bytes += size;
  }
  if (part.length > 0) parts.push(withIds(part));
  return parts;
}

/** How often the listening connection is asked to answer, and how long it has to. */
const LISTEN_CHECK_MS = 5000;
const LISTEN_ANSWER_MS = 5000;
/** Pause between attempts to open the listening connection again. */
const RELISTEN_MS = 1000;

interface Envelope {
  origin: string;
  event: RegistryEvent;
}

export class RegistryEvents {
  private readonly listeners = new Set<RegistryListener>();
  private readonly localListeners = new Set<RegistryListener>();
  private readonly channel = new BroadcastChannel(REGISTRY_CHANNEL);
  private readonly origin = crypto.randomUUID();
  private listenClient: pg.Client | undefined;
  private checkTimer: NodeJS.Timeout | undefined;
  private retryTimer: NodeJS.Timeout | undefined;
  private closed = false;

  constructor(
    private readonly pool: pg.Pool,
    private readonly databaseUrl: string,
    private readonly log: Logger,
  ) {
    this.channel.unref();
  }

  /** Starts receiving other instances' events (LISTEN); the connection is watched and opened again when lost. */
  async start(): Promise<void> {
    await this.listen();
  }

  on(listener: RegistryListener): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** Events of changes made by this instance only (not other instances' through NOTIFY): for work that one instance must do once. */
  onLocal(listener: RegistryListener): () => void {
    this.localListeners.add(listener);
    return () => this.localListeners.delete(listener);
  }

  /**
   * Runs a registry change in one transaction. `fn` announces each event of the change with
   * `announce` (NOTIFY on the transaction's connection: other instances hear it at the commit,
   * or never); once committed, this process hears them. A failed announcement fails the change.
   */
  async change<T>(fn: (client: pg.PoolClient, announce: Announce) => Promise<T>): Promise<T> {
    let announced: RegistryEvent[] = [];
    const result = await inTransaction(this.pool, async (client) => {
      announced = []; // a transaction run again (deadlock) announces afresh
      return fn(client, async (event) => {
        for (const part of notifications(event)) await client.query('SELECT pg_notify($1, $2)', [NOTIFY_CHANNEL, this.payload(part)]);
        announced.push(event);
      });
    });
    for (const event of announced) this.committed(event);
    return result;
  }

  /**
   * Announces a change committed without `change` (test fixtures writing SQL directly): to this
   * process, then to the others. Rejects if the notification cannot be sent.
   */
  async publish(event: RegistryEvent): Promise<void> {
    this.committed(event);
    for (const part of notifications(event)) await this.pool.query('SELECT pg_notify($1, $2)', [NOTIFY_CHANNEL, this.payload(part)]);
  }

  /** A change of this instance, committed: this process's listeners, then the local-only ones. */
  private committed(event: RegistryEvent): void {
    this.deliver(event);
    for (const l of this.localListeners) {
      try {
        l(event);
      } catch (err) {
        this.log.error('registry event listener failed', { error: err as Error });
      }
    }
  }

  async close(): Promise<void> {
    this.closed = true;
    clearInterval(this.checkTimer);
    clearTimeout(this.retryTimer);
    this.channel.close();
    const client = this.listenClient;
    this.listenClient = undefined;
    if (client) await Promise.race([client.end().catch(() => undefined), new Promise((r) => setTimeout(r, 1000).unref())]);
  }

  private payload(event: RegistryEvent): string {
    const payload = JSON.stringify({ origin: this.origin, event } satisfies Envelope);
    if (Buffer.byteLength(payload) <= MAX_NOTIFY_BYTES) return payload;
    return JSON.stringify({ origin: this.origin, event: { type: 'tenant.changed', tenant: event.tenant } } satisfies Envelope);
  }

  /**
   * Local listeners and this process's worker threads. After `close` (shutdown) the threads are
   * gone: a change committed by a request finishing then is still answered, not failed.
   */
  private deliver(event: RegistryEvent): void {
    for (const l of this.listeners) {
      try {
        l(event);
      } catch (err) {
        this.log.error('registry event listener failed', { error: err as Error });
      }
    }
    // Closed at shutdown (after the HTTP server, which may have given up waiting for a slow
    // request): the change is committed all the same, and the ingest threads are gone.
    if (!this.closed) this.channel.postMessage(event);
  }

  /** Opens the listening connection, LISTENs, and watches it. */
  private async listen(): Promise<void> {
    const client = new pg.Client({
      connectionString: this.databaseUrl,
      options: SESSION_OPTIONS,
      application_name: LISTEN_APPLICATION_NAME,
      keepAlive: true,
      connectionTimeoutMillis: LISTEN_ANSWER_MS,
    });
    let lost = false;
    const onLost = (why: string) => {
      if (lost) return;
      lost = true;
      clearInterval(this.checkTimer);
      const wasListening = this.listenClient === client;
      if (wasListening) this.listenClient = undefined;
      // A connection that stopped answering is not waited for: its socket goes at once (pg's
      // `connection` is not in @types/pg).
      (client as unknown as { connection?: { stream?: { destroy(): void } } }).connection?.stream?.destroy();
      if (this.closed) return;
      this.log.warn('lost the registry change notifications; caches dropped, listening again', { reason: why });
      // Dropped now as well as once listening again: until then no change is heard, and an entry
      // kept from before (an ingest device model read less than RECHECK_AFTER_MS ago is trusted
      // without a check) would drop the values of an attribute another instance adds meanwhile.
      // (once per loss: a failed attempt to listen again was never listening)
      if (wasListening) this.deliver({ type: 'tenant.changed', tenant: '*' });
      this.relisten();
    };
    client.on('error', (err) => onLost(err.message));
    client.on('end', () => onLost('connection closed'));
    client.on('notification', (msg) => {
      if (!msg.payload) return;
      try {
        const env = JSON.parse(msg.payload) as Envelope;
        if (env.origin !== this.origin) this.deliver(env.event);
      } catch {
        /* not ours */
      }
    });
    try {
      await client.connect();
      await client.query(`LISTEN ${NOTIFY_CHANNEL}`);
    } catch (err) {
      lost = true;
      await client.end().catch(() => undefined);
      throw err;
    }
    this.listenClient = client;
    // A connection can die without a word (a dropped route, a proxy's idle timeout): it must
    // answer a query now and then, or it is replaced.
    this.checkTimer = setInterval(() => {
      let answered = false;
      setTimeout(() => answered || onLost(`no answer within ${LISTEN_ANSWER_MS / 1000} s`), LISTEN_ANSWER_MS).unref();
      client.query('SELECT 1').then(
        () => (answered = true),
        (err: Error) => onLost(err.message),
      );
    }, LISTEN_CHECK_MS);
    this.checkTimer.unref();
  }

  /**
   * Listens again until it works; then every cache of this process is dropped, since events were
   * missed meanwhile. One attempt is scheduled at a time: a connection that fails as it opens
   * both ends (onLost) and rejects, and each used to schedule one, doubling the attempts every
   * second of an outage and leaving as many listeners afterwards (each event delivered n times).
   */
  private relisten(): void {
    if (this.closed || this.retryTimer) return;
    this.retryTimer = setTimeout(() => {
      this.retryTimer = undefined;
      if (this.closed) return;
      this.listen().then(
        () => {
          this.log.info('listening to registry change notifications again; caches dropped');
          this.deliver({ type: 'tenant.changed', tenant: '*' });
        },
        () => this.relisten(),
      );
    }, RELISTEN_MS);
    this.retryTimer.unref();
  }
}
