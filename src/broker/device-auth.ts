// Device authorisation for the embedded broker (decisions.md "Device messages (MQTT)"):
//   - CONNECT: a username must be `<tenant>:<id>` of an existing device (default mode); without
//     a username, a client id of that form identifies the device (legacy); a client with
//     neither is accepted and identified by the first legacy topic it uses.
//   - PUBLISH: only to its own attrs topic (`<tenant>:<id>/attrs` or `/<tenant>/<id>/attrs`);
//     anything else closes the connection (MQTT 3.1.1 has no negative PUBACK).
//   - SUBSCRIBE: only to its own config topic; anything else is refused in the SUBACK (0x80).
//   - A removed device's connections are closed.
// An accepted attrs message goes to the inbox (ingest); for QoS 1 the broker's PUBACK waits for
// its ack handle, i.e. for the commit (authorizePublish is the last step before aedes acks).
import type { AedesOptions, AuthenticateError, Client, PublishPacket, Subscription } from 'aedes';
import type { Logger } from '../log.js';
import type { DeviceDirectory } from './device-directory.js';
import { NO_ACK, type AckHandle, type Inbox } from './link.js';
import { deviceKey, parseDeviceName, parseDeviceTopic, sameDevice, type DeviceRef } from '../topics.js';

// The hooks' callbacks (aedes does not export their types).
type AuthenticateDone = (error: AuthenticateError | null, success: boolean | null) => void;
/** authorizePublish's callback: aedes goes on with the publish (its PUBACK) once called. */
type PublishDone = (error?: Error | null) => void;
type SubscribeDone = (error: Error | null, subscription?: Subscription | null) => void;

/** The ack handle of a QoS 1/2 message: lets aedes go on with the publish, which sends its PUBACK. */
class AuthorisedPublish implements AckHandle {
  constructor(private done: PublishDone | undefined) {}

  ack(): void {
    const done = this.done;
    if (!done) return;
    this.done = undefined;
    done(null);
  }
}

// CONNACK return codes (MQTT 3.1.1): 3 server unavailable, 4 bad user name or password, 5 not authorised.
function refused(returnCode: 3 | 4 | 5, message: string): AuthenticateError {
  return Object.assign(new Error(message), { returnCode });
}

export class DeviceAuthorisation {
  private readonly identity = new WeakMap<Client, DeviceRef>();
  private readonly sessions = new Map<string, Set<Client>>();
  /** Shutdown: messages are no longer taken (see `hold`). */
  private holding = false;

  constructor(
    private readonly directory: DeviceDirectory,
    private readonly inbox: Inbox,
    private readonly log: Logger,
  ) {}

  /** The aedes hooks. */
  hooks(): Partial<AedesOptions> {
    return {
      authenticate: (client, username, _password, done) => this.authenticate(client, username, done),
      authorizePublish: (client, packet, done) => this.authorizePublish(client, packet, done),
      authorizeSubscribe: (client, sub, done) => this.authorizeSubscribe(client, sub, done),
    };
  }

  /** CONNECT: the username (default mode) or else the client id (legacy) must name an existing device; with neither, a legacy topic identifies the client later. */
  private authenticate(client: Client, username: string | undefined, done: AuthenticateDone): void {
    let ref: DeviceRef | undefined;
    if (username !== undefined && username !== '') {
      ref = parseDeviceName(username);
      if (!ref) return done(refused(4, 'the username must be <tenant>:<device id>'), false);
    } else {
      ref = parseDeviceName(client.id);
      if (!ref) return done(null, true); // identified later by a legacy topic
    }
    const device = ref;
    this.directory.exists(device.tenant, device.id).then(
      (exists) => {
        if (!exists) return done(refused(5, 'no such device'), false);
        this.bind(client, device);
        done(null, true);
      },
      (err: Error) => {
        this.log.warn('device lookup failed; connection refused', { tenant: device.tenant, device: device.id, error: err.message });
        done(refused(3, 'server unavailable'), false);
      },
    );
  }

  /** PUBLISH: only to the client's own attrs topic (a legacy one may identify it); anything else closes the connection. */
  private authorizePublish(client: Client | null, packet: PublishPacket, done: PublishDone): void {
    if (!client) return done(new Error('publishing without a client is not allowed'));
    const topic = parseDeviceTopic(packet.topic);
    if (!topic || topic.kind !== 'attrs') return done(new Error(`devices may only publish to their attrs topic, not ${packet.topic}`));
    const bound = this.identity.get(client);
    if (bound) {
      if (!sameDevice(bound, topic)) return done(new Error(`${deviceName(bound)} may not publish to ${packet.topic}`));
      return this.handOver(topic, packet, done);
    }
    if (!topic.legacy) return done(new Error('default-mode topics need the username <tenant>:<device id>'));
    this.identifyByTopic(client, topic).then(
      (ok) => (ok ? this.handOver(topic, packet, done) : done(new Error(`no such device: ${deviceName(topic)}`))),
      (err: Error) => done(err),
    );
  }

  /**
   * Shutdown: from now on a message is neither handed over nor acknowledged. aedes reads nothing
   * more from that connection, and when the broker closes the device sends the message again,
   * to the next instance (QoS 1/2; a QoS 0 message is at most once by definition).
   */
  hold(): void {
    this.holding = true;
  }

  /** An authorised attrs message to the inbox: QoS 0 goes on at once, QoS 1/2 (the PUBACK) when ingest uses its ack handle. */
  private handOver(device: DeviceRef, packet: PublishPacket, done: PublishDone): void {
    if (this.holding) return;
    const payload = typeof packet.payload === 'string' ? Buffer.from(packet.payload) : packet.payload;
    if (packet.qos === 0) {
      done(null);
      this.inbox.accept(device.tenant, device.id, payload, NO_ACK);
    } else {
      this.inbox.accept(device.tenant, device.id, payload, new AuthorisedPublish(done));
    }
  }

  /** SUBSCRIBE: only to the client's own config topic (a legacy one may identify it); anything else is refused in the SUBACK. */
  private authorizeSubscribe(client: Client, sub: Subscription, done: SubscribeDone): void {
    const topic = parseDeviceTopic(sub.topic);
    if (!client || !topic || topic.kind !== 'config') return done(null, null);
    const bound = this.identity.get(client);
    if (bound) return done(null, sameDevice(bound, topic) ? sub : null);
    if (!topic.legacy) return done(null, null);
    this.identifyByTopic(client, topic).then(
      (ok) => done(null, ok ? sub : null),
      () => done(null, null),
    );
  }

  /** Forgets a client when it goes away. */
  disconnected(client: Client): void {
    const ref = this.identity.get(client);
    if (!ref) return;
    const key = deviceKey(ref.tenant, ref.id);
    const set = this.sessions.get(key);
    set?.delete(client);
    if (set && set.size === 0) this.sessions.delete(key);
  }

  /** Closes every connection of a removed device. */
  closeDevice(tenant: string, id: string): void {
    const set = this.sessions.get(deviceKey(tenant, id));
    if (!set) return;
    this.sessions.delete(deviceKey(tenant, id));
    for (const client of set) {
      this.log.info('closing the MQTT session of a removed device', { tenant, device: id, client: client.id });
      client.close();
    }
  }

  private async identifyByTopic(client: Client, topic: DeviceRef): Promise<boolean> {
    if (!(await this.directory.exists(topic.tenant, topic.id))) return false;
    // Two messages may race to identify the client: the first one wins.
    const bound = this.identity.get(client);
    if (bound) return sameDevice(bound, topic);
    this.bind(client, { tenant: topic.tenant, id: topic.id });
    return true;
  }

  private bind(client: Client, ref: DeviceRef): void {
    this.identity.set(client, ref);
    const key = deviceKey(ref.tenant, ref.id);
    let set = this.sessions.get(key);
    if (!set) this.sessions.set(key, (set = new Set()));
    set.add(client);
  }
}

function deviceName(ref: DeviceRef): string {
  return `${ref.tenant}:${ref.id}`;
}
