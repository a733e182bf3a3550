// Registry change events. The registry publishes one after each committed change; listeners
// drop what they cached: the HTTP device views in this thread, the ingest shard caches in the
// worker threads (through a BroadcastChannel), and other service instances (through PostgreSQL
// NOTIFY). An event names what changed, never a secret.
import crypto from 'node:crypto';
import { BroadcastChannel } from 'node:worker_threads';
import pg from 'pg';
import type { Logger } from '../log.js';

export type RegistryEvent =
  /** Devices created or changed (label, templates, overrides, keys). */
  | { type: 'devices.changed'; tenant: string; deviceIds: string[] }
  /** Devices removed: caches drop them and their MQTT sessions are closed. */
  | { type: 'devices.removed'; tenant: string; deviceIds: string[] }
  /** Templates changed or removed: every device built from them changed too. */
  | { type: 'templates.changed'; tenant: string; templateIds: number[] }
  /**
   * A device's credentials changed (one created, or `removedIds` deleted): login caches drop the
   * device; the connections that logged in with a removed credential are closed.
   */
  | { type: 'credentials.changed'; tenant: string; deviceId: string; removedIds: string[] }
  /** Anything of the tenant may have changed (when a precise event would be too large); `*`: every tenant. */
  | { type: 'tenant.changed'; tenant: string };

export type RegistryListener = (event: RegistryEvent) => void;

/** The channel name shared by every thread of this process. */
export const REGISTRY_CHANNEL = 'device-registry:registry-events';
const NOTIFY_CHANNEL = 'registry_events';
// NOTIFY payloads must stay under 8000 bytes; larger events degrade to tenant-wide ones.
const MAX_NOTIFY_BYTES = 7000;

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
  private closed = false;

  constructor(
    private readonly pool: pg.Pool,
    private readonly databaseUrl: string,
    private readonly log: Logger,
  ) {
    this.channel.unref();
  }

  /** Starts receiving other instances' events (LISTEN), reconnecting if the connection drops. */
  async start(): Promise<void> {
    await this.connectListener();
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

  /** Call after the change is committed. */
  async publish(event: RegistryEvent): Promise<void> {
    this.deliver(event);
    for (const l of this.localListeners) {
      try {
        l(event);
      } catch (err) {
        this.log.error('registry event listener failed', { error: err as Error });
      }
    }
    let payload = JSON.stringify({ origin: this.origin, event } satisfies Envelope);
    if (Buffer.byteLength(payload) > MAX_NOTIFY_BYTES) {
      payload = JSON.stringify({ origin: this.origin, event: { type: 'tenant.changed', tenant: event.tenant } } satisfies Envelope);
    }
    await this.pool.query('SELECT pg_notify($1, $2)', [NOTIFY_CHANNEL, payload]).catch((err: Error) => {
      this.log.warn('could not notify other instances of a registry change', { error: err.message });
    });
  }

  async close(): Promise<void> {
    this.closed = true;
    this.channel.close();
    await this.listenClient?.end().catch(() => undefined);
  }

  /** Local listeners and this process's worker threads. */
  private deliver(event: RegistryEvent): void {
    for (const l of this.listeners) {
      try {
        l(event);
      } catch (err) {
        this.log.error('registry event listener failed', { error: err as Error });
      }
    }
    this.channel.postMessage(event);
  }

  private async connectListener(): Promise<void> {
    if (this.closed) return;
    const client = new pg.Client({ connectionString: this.databaseUrl });
    client.on('error', () => undefined);
    client.on('end', () => {
      if (this.closed) return;
      // Reconnect; events missed meanwhile are covered by dropping everything once back.
      setTimeout(() => {
        this.connectListener()
          .then(() => this.deliverAllTenantsChanged())
          .catch(() => undefined);
      }, 1000).unref();
    });
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
      this.listenClient = client;
    } catch (err) {
      await client.end().catch(() => undefined);
      throw err;
    }
  }

  private deliverAllTenantsChanged(): void {
    this.deliver({ type: 'tenant.changed', tenant: '*' });
  }
}
