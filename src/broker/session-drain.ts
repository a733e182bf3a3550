// Emptying and ending broker sessions that no running instance uses: those of an instance that
// died (its lease ran out: session-leases.ts), or the extra ones of a slot now run with fewer
// connections. One connection per session, with that session's client id: it resumes the
// session and unsubscribes at once, so the broker routes nothing more to it (the share group's
// other members get it all), and hands over what it had queued and in flight. Those messages
// go to the inbox like any other and are acknowledged after their commit. Once every connection
// has had nothing in flight and nothing coming in for QUIET_MS, the sessions are ended (a clean
// start discards a session), and nothing that was routed to them is left behind.
//
// Measured with Mosquitto 2.0.11: a session left offline in a share group of two kept half of
// what was published meanwhile; resumed and unsubscribed, it handed over all of it, and
// everything published after the UNSUBACK went to the other member.
import mqtt from 'mqtt';
import type { Logger } from '../log.js';
import { brokerLogin } from './broker-url.js';
import type { AckHandle } from './link.js';
import { SubscriberConnection, type MqttVersion } from './subscriber.js';

/** How long every connection must have been quiet before its session counts as empty. */
export const QUIET_MS = 2000;

export interface DrainOptions {
  url: string;
  clientIds: string[];
  version: MqttVersion;
  /** The filters the sessions were subscribed with (unsubscribed). */
  filters: string[];
  sessionExpirySeconds: number;
  receiveMaximum: number;
  keepaliveSeconds: number;
  maxPacketBytes: number;
  log: Logger;
  onMessage: (topic: string, payload: Buffer, ack: AckHandle) => void;
  /** A message over `maxPacketBytes` (SubscriberOptions.onTooLarge). */
  onTooLarge: (ack: AckHandle) => void;
  /** Whether the drain's lease is still held (reconnects wait otherwise). */
  mayReconnect: () => boolean;
  quietMs?: number;
}

export class SessionDrain {
  private readonly connections: SubscriberConnection[];
  private stopped = false;
  private paused = false;

  constructor(private readonly opts: DrainOptions) {
    this.connections = opts.clientIds.map(
      (clientId) =>
        new SubscriberConnection({
          url: opts.url,
          clientId,
          version: opts.version,
          filters: opts.filters,
          sessionExpirySeconds: opts.sessionExpirySeconds,
          receiveMaximum: opts.receiveMaximum,
          keepaliveSeconds: opts.keepaliveSeconds,
          maxPacketBytes: opts.maxPacketBytes,
          log: opts.log,
          onMessage: opts.onMessage,
          onTooLarge: opts.onTooLarge,
          drain: true,
          mayReconnect: opts.mayReconnect,
        }),
    );
  }

  /** Resumes the sessions, takes what they hold, ends them. Rejects if stopped first or the broker cannot be reached. */
  async run(): Promise<void> {
    await Promise.all(this.connections.map((c) => c.start()));
    if (this.paused) for (const c of this.connections) c.pause();
    const quiet = this.opts.quietMs ?? QUIET_MS;
    while (!this.connections.every((c) => c.quietMs() >= quiet)) {
      if (this.stopped) throw new Error('the drain was stopped');
      await new Promise((r) => setTimeout(r, 100));
    }
    await Promise.all(this.connections.map((c) => c.close()));
    for (const clientId of this.opts.clientIds) await endSession(this.opts.url, clientId, this.opts.version);
  }

  pause(): void {
    this.paused = true;
    for (const c of this.connections) c.pause();
  }

  resume(): void {
    this.paused = false;
    for (const c of this.connections) c.resume();
  }

  /** Stops where it is: the sessions stay (with what they still hold) for a later drain. */
  async stop(): Promise<void> {
    this.stopped = true;
    await Promise.all(this.connections.map((c) => c.close()));
  }
}

/** Ends a session (nothing must be routed to it any more): a clean start discards it, an expiry of 0 keeps none. */
export async function endSession(url: string, clientId: string, version: MqttVersion): Promise<void> {
  const { url: address, ...credentials } = brokerLogin(url);
  const client = await mqtt.connectAsync(address, {
    ...credentials,
    clientId,
    clean: true,
    protocolVersion: version,
    reconnectPeriod: 0,
    connectTimeout: 5000,
    ...(version === 5 ? { properties: { sessionExpiryInterval: 0 } } : {}),
  });
  await client.endAsync();
}
