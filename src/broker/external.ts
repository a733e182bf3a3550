// The link to an external broker (MQTT_URL, e.g. Mosquitto, EMQX):
//   - ingest: MQTT_SUBSCRIBER_CONNECTIONS connections in one MQTT 5 shared subscription
//     (`$share/<group>/+/attrs` and `$share/<group>//+/+/attrs`), each with its own fixed client
//     id (`<MQTT_CLIENT_ID>-<n>`), a persistent session and a large Receive Maximum, so the
//     broker spreads the load and keeps messages while the service is away. A broker that
//     refuses MQTT 5 (aedes) gets one MQTT 3.1.1 connection with plain subscriptions instead
//     (several 3.1.1 connections would each receive every message).
//   - actuation: one mqtt.js publisher connection (`<MQTT_CLIENT_ID>-actuation`); a
//     configuration message counts as sent once the broker acknowledged it (QoS 1 PUBACK).
import mqtt from 'mqtt';
import type { Logger } from '../log.js';
import { ATTRS_FILTERS, parseDeviceTopic, type DeviceTopic } from './topics.js';
import { ProtocolRefused, SubscriberConnection, type MqttVersion } from './subscriber.js';
import { BrokerUnavailable, type AckHandle, type BrokerLink, type Inbox, type LinkState } from './link.js';

const TOPIC_CACHE = 200_000;
/** How long the start waits for the actuation publisher's first connection. */
const PUBLISHER_CONNECT_MS = 10_000;

/** Client id of ingest subscriber connection `n` (0-based) of a service whose MQTT_CLIENT_ID is `base`. */
export function subscriberClientId(base: string, n: number): string {
  return `${base}-${n}`;
}

export interface ExternalLinkOptions {
  url: string;
  clientId: string;
  connections: number;
  shareGroup: string;
  sessionExpirySeconds: number;
  receiveMaximum: number;
  publishTimeoutMs: number;
  log: Logger;
}

type OnMessage = (topic: string, payload: Buffer, ack: AckHandle) => void;

/** The subscribers' messages, by topic, to the inbox. Topics repeat (one per device): each is parsed once. */
function toInbox(inbox: Inbox): OnMessage {
  const topics = new Map<string, DeviceTopic | null>();
  return (topic, payload, ack) => {
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
}

/**
 * The subscriber connections: MQTT 5 in one shared subscription, or, when the broker refuses
 * MQTT 5 on the first connection, a single MQTT 3.1.1 one with plain subscriptions.
 */
async function connectSubscribers(
  opts: ExternalLinkOptions,
  onMessage: OnMessage,
): Promise<{ subscribers: SubscriberConnection[]; version: MqttVersion }> {
  const make = (n: number, version: MqttVersion) =>
    new SubscriberConnection({
      url: opts.url,
      clientId: subscriberClientId(opts.clientId, n),
      version,
      filters: version === 5 ? ATTRS_FILTERS.map((f) => `$share/${opts.shareGroup}/${f}`) : [...ATTRS_FILTERS],
      sessionExpirySeconds: opts.sessionExpirySeconds,
      receiveMaximum: opts.receiveMaximum,
      log: opts.log,
      onMessage,
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
  opts.log.warn('the broker does not speak MQTT 5: one MQTT 3.1.1 subscriber connection without a shared subscription');
  return { subscribers: [only], version: 4 };
}

/** The actuation publisher, connected (it reconnects by itself later); rejects if the first connection fails. */
async function connectPublisher(opts: ExternalLinkOptions, version: MqttVersion): Promise<mqtt.MqttClient> {
  const publisher = mqtt.connect(opts.url, {
    clientId: `${opts.clientId}-actuation`,
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

  private constructor(
    private readonly subscribers: SubscriberConnection[],
    private readonly publisher: mqtt.MqttClient,
    readonly version: MqttVersion,
    private readonly opts: ExternalLinkOptions,
  ) {}

  static async start(opts: ExternalLinkOptions, inbox: Inbox): Promise<ExternalLink> {
    const { subscribers, version } = await connectSubscribers(opts, toInbox(inbox));
    for (const c of subscribers) {
      c.on('disconnected', () => opts.log.warn('ingest subscriber lost the broker; reconnecting'));
      c.on('connected', () => opts.log.info('ingest subscriber connected'));
    }
    const publisher = await connectPublisher(opts, version).catch(async (err: unknown) => {
      await Promise.all(subscribers.map((c) => c.close()));
      throw err;
    });
    opts.log.info('connected to the MQTT broker', {
      broker: new URL(opts.url).host,
      protocol: version === 5 ? 'MQTT 5, shared subscription' : 'MQTT 3.1.1',
      subscribers: subscribers.length,
    });
    return new ExternalLink(subscribers, publisher, version, opts);
  }

  pause(): void {
    for (const c of this.subscribers) c.pause();
  }

  resume(): void {
    for (const c of this.subscribers) c.resume();
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
    return { up: subscribers > 0 && publisher === 1, connected: subscribers + publisher, connections: this.subscribers.length + 1 };
  }

  registryChanged(): void {
    // Nothing cached; sessions on an external broker are the broker's business (revoke the device's account there).
  }

  stopAccepting(): void {}

  async close(): Promise<void> {
    await Promise.all(this.subscribers.map((c) => c.close()));
    await new Promise<void>((resolve) => this.publisher.end(false, {}, () => resolve()));
  }
}
