// The link to an external broker (MQTT_URL, e.g. Mosquitto, EMQX):
//   - ingest: MQTT_SUBSCRIBER_CONNECTIONS connections in one MQTT 5 shared subscription
//     (`$share/<group>/+/attrs` and `$share/<group>//+/+/attrs`), each with its own client id
//     (`<prefix>-<n>`), a persistent session and a large Receive Maximum, so the broker spreads
//     the load and keeps messages while the service is away. A broker that refuses MQTT 5
//     (aedes) gets one MQTT 3.1.1 connection with plain subscriptions instead (several 3.1.1
//     connections would each receive every message).
//   - the prefix is the slot of MQTT_CLIENT_ID this instance leases (session-leases.ts), renewed
//     every third of MQTT_SESSION_LEASE_SECONDS; on each renewal the link also looks for a slot
//     of its share group whose lease ran out (an instance that died) and drains it
//     (session-drain.ts). Should its own lease be taken (it could not renew in time), it says
//     so (`onSessionsLost`) and must be started again.
//   - leaving (shutdown): when another instance of the share group runs, the subscribers
//     unsubscribe, take what the broker had queued for them, and end their sessions; the last
//     instance keeps its sessions instead, so that the broker queues for the deployment until
//     an instance is back (it resumes them). Either way nothing routed to this instance is left
//     in a session nobody will read.
//   - actuation: one mqtt.js publisher connection (`<prefix>-actuation`); a configuration message
//     counts as sent once the broker acknowledged it (QoS 1 PUBACK).
import mqtt from 'mqtt';
import type { Logger } from '../log.js';
import { ATTRS_FILTERS, parseDeviceTopic, type DeviceTopic } from '../topics.js';
import { brokerLogin } from './broker-url.js';
import { ProtocolRefused, SubscriberConnection, type MqttVersion } from './subscriber.js';
import { BrokerUnavailable } from '../errors.js';
import { type AckHandle, type BrokerLink, type Inbox, type LinkState } from './link.js';
import { endSession, SessionDrain } from './session-drain.js';
import type { SessionLeases } from './session-leases.js';

const TOPIC_CACHE = 200_000;
/** How long the start waits for the actuation publisher's first connection. */
const PUBLISHER_CONNECT_MS = 10_000;

/** How long a leaving instance waits for what its sessions held to stop coming. */
const LEAVING_QUIET_MS = 300;

/** Client id of ingest subscriber connection `n` (0-based) of an instance whose client id prefix is `prefix`. */
export function subscriberClientId(prefix: string, n: number): string {
  return `${prefix}-${n}`;
}

/** The subscription filters of a share group (MQTT 5), or the plain ones (3.1.1). */
function filtersOf(version: MqttVersion, shareGroup: string): string[] {
  return version === 5 ? ATTRS_FILTERS.map((f) => `$share/${shareGroup}/${f}`) : [...ATTRS_FILTERS];
}

export interface ExternalLinkOptions {
  url: string;
  /** MQTT_CLIENT_ID: the base of the leased prefixes. */
  clientId: string;
  connections: number;
  shareGroup: string;
  sessionExpirySeconds: number;
  receiveMaximum: number;
  keepaliveSeconds: number;
  /** Sent as the subscribers' Maximum Packet Size (MQTT 5): the broker sends nothing larger. */
  maxPacketBytes: number;
  publishTimeoutMs: number;
  log: Logger;
  leases: SessionLeases;
  leaseSeconds: number;
  /** Another instance took this instance's sessions (its lease ran out unrenewed): stop, and start again. */
  onSessionsLost(): void;
}

/** The leased slot the subscribers run on, and what its previous holder left. */
interface Slot {
  prefix: string;
  /** Share groups the sessions may be subscribed in besides ours (to leave). */
  staleGroups: string[];
}

/** Where a subscriber connection hands its messages (SubscriberOptions). */
interface Deliveries {
  onMessage: (topic: string, payload: Buffer, ack: AckHandle) => void;
  onTooLarge: (ack: AckHandle) => void;
}

/** The subscribers' messages, by topic, to the inbox. Topics repeat (one per device): each is parsed once. */
function toInbox(inbox: Inbox): Deliveries {
  const topics = new Map<string, DeviceTopic | null>();
  // A packet over the limit (a broker not told it: MQTT 3.1.1) is counted `oversized`, never read.
  const onTooLarge = (ack: AckHandle) => inbox.refuse('packet_too_large', ack);
  const onMessage = (topic: string, payload: Buffer, ack: AckHandle) => {
    let t = topics.get(topic);
    if (t === undefined) {
      const parsed = parseDeviceTopic(topic);
      t = parsed && parsed.kind === 'attrs' ? parsed : null;
      if (topics.size >= TOPIC_CACHE) topics.clear();
      topics.set(topic, t);
    }
    if (t === null) inbox.refuse('not_a_device_topic', ack);
    else inbox.accept(t.tenant, t.id, payload, ack);
  };
  return { onMessage, onTooLarge };
}

/**
 * The subscriber connections: MQTT 5 in one shared subscription, or, when the broker refuses
 * MQTT 5 on the first connection, a single MQTT 3.1.1 one with plain subscriptions.
 */
async function connectSubscribers(
  opts: ExternalLinkOptions,
  slot: Slot,
  deliveries: Deliveries,
): Promise<{ subscribers: SubscriberConnection[]; version: MqttVersion }> {
  const make = (n: number, version: MqttVersion) =>
    new SubscriberConnection({
      url: opts.url,
      clientId: subscriberClientId(slot.prefix, n),
      version,
      filters: filtersOf(version, opts.shareGroup),
      ...(version === 5 && slot.staleGroups.length > 0 ? { staleFilters: slot.staleGroups.flatMap((g) => filtersOf(5, g)) } : {}),
      sessionExpirySeconds: opts.sessionExpirySeconds,
      receiveMaximum: opts.receiveMaximum,
      keepaliveSeconds: opts.keepaliveSeconds,
      maxPacketBytes: opts.maxPacketBytes,
      log: opts.log,
      ...deliveries,
      mayReconnect: () => opts.leases.holds(slot.prefix),
    });
  const subscribers: SubscriberConnection[] = [];
  const first = make(0, 5);
  try {
    await first.start();
    subscribers.push(first);
    const rest = Array.from({ length: opts.connections - 1 }, (_, i) => make(i + 1, 5));
    await Promise.all(rest.map((c) => c.start()));
    subscribers.push(...rest);
    return { subscribers, version: 5 };
  } catch (err) {
    if (!(err instanceof ProtocolRefused) || subscribers.length > 0) {
      await Promise.all(subscribers.map((c) => c.close()));
      throw err;
    }
  }
  const only = make(0, 4);
  await only.start();
  if (slot.prefix === opts.clientId) {
    opts.log.warn('the broker does not speak MQTT 5: one MQTT 3.1.1 subscriber connection without a shared subscription');
  } else {
    // Not the first slot: another instance holds it, and takes every message in as well.
    opts.log.error(
      'the broker does not speak MQTT 5 and another instance of this deployment runs: without a shared subscription each instance takes every device message in, stored once per instance; run one instance against this broker (docs/operations.md §7)',
      { clientIds: `${subscriberClientId(slot.prefix, 0)}`, shareGroup: opts.shareGroup },
    );
  }
  return { subscribers: [only], version: 4 };
}

/** The actuation publisher, connected (it reconnects by itself later); rejects if the first connection fails. */
async function connectPublisher(opts: ExternalLinkOptions, prefix: string, version: MqttVersion): Promise<mqtt.MqttClient> {
  const { url: address, ...credentials } = brokerLogin(opts.url);
  const publisher = mqtt.connect(address, {
    ...credentials,
    clientId: `${prefix}-actuation`,
    protocolVersion: version,
    clean: true,
    reconnectPeriod: 1000,
    connectTimeout: 5000,
  });
  publisher.on('error', (err) => opts.log.debug('actuation publisher error', { error: err.message }));
  try {
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error(`the actuation publisher could not connect to ${new URL(opts.url).host}`)),
        PUBLISHER_CONNECT_MS,
      );
      publisher.once('connect', () => {
        clearTimeout(timer);
        resolve();
      });
    });
  } catch (err) {
    publisher.end(true);
    throw err;
  }
  return publisher;
}

export class ExternalLink implements BrokerLink {
  readonly mqttPort = undefined;
  private readonly heartbeat: NodeJS.Timeout;
  /** Sessions being drained: a lapsed slot of another instance, or extra sessions of our own. */
  private drain: { prefix: string; run: SessionDrain; done: Promise<void> } | undefined;
  private paused = false;
  /** Shutdown: the subscribers left the share group (another instance takes the traffic). */
  private leaving = false;
  /** Leaving, and everything the sessions held came in and was acknowledged. */
  private left = false;
  private lost = false;
  /** A renewal is under way (heartbeats do not overlap: two could claim the same drain). */
  private renewing = false;
  /**
   * Since when every renewal of our leases succeeded (performance.now()): from the start on
   * (-Infinity), until a renewal fails (undefined), then from the next one that succeeds.
   */
  private renewedSince: number | undefined = -Infinity;
  /** Since when renewals fail (performance.now()), so that an outage is logged once, not at every heartbeat. */
  private renewFailingSince: number | undefined;

  private constructor(
    private readonly subscribers: SubscriberConnection[],
    private readonly publisher: mqtt.MqttClient,
    readonly version: MqttVersion,
    private readonly prefix: string,
    private readonly deliveries: Deliveries,
    private readonly opts: ExternalLinkOptions,
  ) {
    this.heartbeat = setInterval(() => void this.renew(), (opts.leaseSeconds * 1000) / 3);
    this.heartbeat.unref();
  }

  static async start(opts: ExternalLinkOptions, inbox: Inbox): Promise<ExternalLink> {
    const claim = await opts.leases.claim();
    const { prefix, previous } = claim;
    // Before leases the share group defaulted to MQTT_CLIENT_ID: a session of those days may
    // still hold that subscription, which would deliver every message a second time. Also when
    // the slot was leased before: a rollback to such a version resumes the sessions of the
    // first slot and subscribes them in that group again, beside the lease's group.
    const stale = new Set<string>();
    if (previous) stale.add(previous.shareGroup);
    if (prefix === opts.clientId) stale.add(opts.clientId);
    stale.delete(opts.shareGroup);
    const slot: Slot = { prefix, staleGroups: [...stale] };
    const deliveries = toInbox(inbox);
    let connected: { subscribers: SubscriberConnection[]; version: MqttVersion };
    let publisher: mqtt.MqttClient;
    try {
      connected = await connectSubscribers(opts, slot, deliveries);
      publisher = await connectPublisher(opts, prefix, connected.version).catch(async (err: unknown) => {
        await Promise.all(connected.subscribers.map((c) => c.close()));
        throw err;
      });
    } catch (err) {
      await opts.leases.release(prefix).catch(() => undefined);
      throw err;
    }
    const { subscribers, version } = connected;
    for (const c of subscribers) {
      c.on('disconnected', () => opts.log.warn('ingest subscriber lost the broker; reconnecting'));
      c.on('connected', () => opts.log.info('ingest subscriber connected'));
    }
    opts.log.info('connected to the MQTT broker', {
      broker: new URL(opts.url).host,
      protocol: version === 5 ? 'MQTT 5, shared subscription' : 'MQTT 3.1.1',
      subscribers: subscribers.length,
      clientIds: `${subscriberClientId(prefix, 0)}..${subscribers.length - 1}`,
      shareGroup: opts.shareGroup,
    });
    const link = new ExternalLink(subscribers, publisher, version, prefix, deliveries, opts);
    // The slot's previous holder ran more connections: their sessions are ours to empty.
    if (previous && previous.connections > opts.connections) {
      const extra = Array.from({ length: previous.connections - opts.connections }, (_, i) =>
        subscriberClientId(prefix, opts.connections + i),
      );
      link.startDrain(prefix, extra, false);
    } else {
      // Sessions left by instances that are gone (the last one to stop keeps its own) are drained at once.
      void link.renew();
    }
    return link;
  }

  pause(): void {
    this.paused = true;
    for (const c of this.subscribers) c.pause();
    this.drain?.run.pause();
  }

  resume(): void {
    this.paused = false;
    for (const c of this.subscribers) c.resume();
    this.drain?.run.resume();
  }

  async publish(topics: string[], payload: string): Promise<void> {
    if (!this.publisher.connected) throw new BrokerUnavailable('not connected to the broker');
    await Promise.all(
      topics.map(
        (topic) =>
          new Promise<void>((resolve, reject) => {
            const timer = setTimeout(
              () => reject(new BrokerUnavailable('the broker did not acknowledge in time')),
              this.opts.publishTimeoutMs,
            );
            this.publisher.publish(topic, payload, { qos: 1, retain: false }, (err) => {
              clearTimeout(timer);
              if (err) reject(new BrokerUnavailable(err.message));
              else resolve();
            });
          }),
      ),
    );
  }

  /** Up while the publisher and at least one subscriber connection are connected (the broker hands the shared subscription's messages to those). */
  state(): LinkState {
    const subscribers = this.subscribers.filter((c) => c.isConnected).length;
    const publisher = this.publisher.connected ? 1 : 0;
    return {
      up: subscribers > 0 && publisher === 1,
      connected: subscribers + publisher,
      connections: this.subscribers.length + 1,
      reconnects: this.subscribers.reduce((n, c) => n + c.reconnects, 0),
    };
  }

  registryChanged(): void {
    // Nothing cached; sessions on an external broker are the broker's business (revoke the device's account there).
  }

  stopAccepting(): void {}

  /**
   * Shutdown, first step: when another instance of the share group runs, the subscribers leave
   * the group and read on (true): the broker routes everything new to the others and hands this
   * instance what it had queued for it. Otherwise (false) they stay, and the caller pauses them.
   */
  async leave(): Promise<boolean> {
    clearInterval(this.heartbeat);
    await this.stopDrain();
    if (this.lost || !(await withTimeout(this.opts.leases.othersAlive(), 1000).catch(() => false))) return false;
    this.leaving = true;
    try {
      await withTimeout(Promise.all(this.subscribers.map((c) => c.unsubscribe())), 2000);
    } catch {
      // Not confirmed: the sessions are kept, and a running instance drains them.
      this.leaving = false;
      return false;
    }
    return true;
  }

  /** Resolves once everything the leaving sessions held came in and was acknowledged. */
  async settled(): Promise<void> {
    while (this.leaving && !this.subscribers.every((c) => c.quietMs() >= LEAVING_QUIET_MS)) await new Promise((r) => setTimeout(r, 50));
    this.left = this.leaving;
  }

  async close(): Promise<void> {
    clearInterval(this.heartbeat);
    await this.stopDrain();
    await Promise.all(this.subscribers.map((c) => c.close()));
    await new Promise<void>((resolve) => this.publisher.end(false, {}, () => resolve()));
    if (this.lost) return;
    try {
      if (this.left) {
        await Promise.all(this.subscribers.map((_, n) => endSession(this.opts.url, subscriberClientId(this.prefix, n), this.version)));
        await withTimeout(this.opts.leases.forget(this.prefix), 1000);
        this.opts.log.info("left the share group and ended this instance's broker sessions");
      } else {
        await withTimeout(this.opts.leases.release(this.prefix), 1000);
      }
    } catch (err) {
      // The lease runs out by itself; the sessions are then resumed or drained.
      this.opts.log.warn('could not end or hand over the broker sessions; they are drained once the lease runs out', {
        error: (err as Error).message,
      });
    }
  }

  /** Renews the leases; then, with none being drained, looks for a slot to drain. */
  private async renew(): Promise<void> {
    if (this.renewing) return;
    this.renewing = true;
    try {
      await this.renewOnce();
    } finally {
      this.renewing = false;
    }
  }

  private async renewOnce(): Promise<void> {
    const mine = [this.prefix, ...(this.drain && this.drain.prefix !== this.prefix ? [this.drain.prefix] : [])];
    let lost: string[];
    try {
      lost = await this.opts.leases.renew(mine);
    } catch (err) {
      this.renewedSince = undefined;
      // Once per outage, not at every heartbeat (a long database outage filled the log; found by an audit).
      if (this.renewFailingSince === undefined) {
        this.renewFailingSince = performance.now();
        this.opts.log.warn('could not renew the lease of the broker sessions; trying again at every heartbeat', {
          error: (err as Error).message,
        });
      }
      return;
    }
    if (this.renewFailingSince !== undefined) {
      this.opts.log.info('the lease of the broker sessions renewed again', {
        failedForMs: Math.round(performance.now() - this.renewFailingSince),
      });
      this.renewFailingSince = undefined;
    }
    const renewedSince = (this.renewedSince ??= performance.now());
    if (lost.includes(this.prefix)) {
      this.lost = true;
      clearInterval(this.heartbeat);
      for (const c of this.subscribers) c.abandon();
      void this.stopDrain();
      this.opts.log.error("another instance took this instance's broker sessions (its lease was not renewed in time)", {
        clientIds: this.prefix,
      });
      this.opts.onSessionsLost();
      return;
    }
    if (this.drain && lost.includes(this.drain.prefix)) void this.drain.run.stop();
    if (this.drain) return;
    // Another instance's lease found run out right after the database was away (for this
    // instance too) says nothing: that one could not renew either. Only after renewing without
    // a miss for a whole lease does this instance take a lapsed slot as abandoned.
    if (performance.now() - renewedSince < this.opts.leaseSeconds * 1000) return;
    const lapsed = await this.opts.leases.claimLapsed(this.prefix).catch(() => undefined);
    if (lapsed) {
      const ids = Array.from({ length: lapsed.connections }, (_, n) => subscriberClientId(lapsed.prefix, n));
      this.startDrain(lapsed.prefix, ids, true);
    }
  }

  /** Drains sessions (session-drain.ts) under the lease of `prefix`; `forget`: the slot is free afterwards. */
  private startDrain(prefix: string, clientIds: string[], forget: boolean): void {
    const run = new SessionDrain({
      url: this.opts.url,
      clientIds,
      version: this.version,
      filters: filtersOf(this.version, this.opts.shareGroup),
      sessionExpirySeconds: this.opts.sessionExpirySeconds,
      receiveMaximum: this.opts.receiveMaximum,
      keepaliveSeconds: this.opts.keepaliveSeconds,
      maxPacketBytes: this.opts.maxPacketBytes,
      log: this.opts.log,
      ...this.deliveries,
      mayReconnect: () => this.opts.leases.holds(prefix),
    });
    if (this.paused) run.pause();
    this.opts.log.info('draining broker sessions nobody runs', { clientIds: `${clientIds[0]}..`, sessions: clientIds.length });
    const done = run.run().then(
      async () => {
        this.opts.log.info('drained and ended broker sessions nobody ran', { clientIds: `${clientIds[0]}..`, sessions: clientIds.length });
        // The database away at this moment: the slot stays leased to this instance until the
        // lease runs out; then a running instance claims it, finds nothing to drain and frees it.
        // (A rejection here went unhandled and ended the router thread.)
        if (forget)
          await this.opts.leases
            .forget(prefix)
            .catch((err: Error) => this.opts.log.warn('freeing a drained session slot failed', { prefix, error: err.message }));
      },
      async (err: Error) => {
        await run.stop();
        if (forget) await this.opts.leases.release(prefix).catch(() => undefined);
        if (!this.lost && !this.leaving)
          this.opts.log.warn('draining broker sessions failed; tried again later', { clientIds: `${clientIds[0]}..`, error: err.message });
      },
    );
    const drain = { prefix, run, done };
    this.drain = drain;
    void done.finally(() => {
      if (this.drain === drain) this.drain = undefined;
    });
  }

  /** Stops a drain under way (its sessions stay for a later one) and waits until its lease is handed back. */
  private async stopDrain(): Promise<void> {
    const drain = this.drain;
    if (!drain) return;
    await drain.run.stop();
    await drain.done;
  }
}

function withTimeout<T>(p: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([p, new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error('timed out')), ms)))]).finally(() =>
    clearTimeout(timer),
  );
}
