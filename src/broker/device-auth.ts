// Device authorisation for the embedded broker (decisions.md "Device messages (MQTT)",
// docs/credentials.md):
//   - CONNECT: the client names its device by a username `<tenant>:<id>` (default mode), a
//     client certificate with that CN (TLS listener with MQTT_TLS_CA), or else its client id
//     (legacy); the registry decides the login (LoginCheck, by MQTT_DEVICE_AUTH) from that and
//     its password. A client naming no device is named later by the first legacy topic it uses,
//     and its password is checked then. Refused: CONNACK "bad user name or password" (3.1.1 code
//     4, MQTT 5 0x86); with MQTT_DEVICE_AUTH=off an unknown device keeps today's "not
//     authorised" (5).
//   - A client id belongs to one device (the one it names, else the last that logged in with
//     it, while its connection or persistent session lasts): another device's login with it is
//     refused "identifier rejected" (2), so nobody can push a device off the broker, or take its
//     session, by its client id.
//   - PUBLISH / SUBSCRIBE: the topic rules (topic-rules.ts). A refused publish closes the
//     connection (MQTT 3.1.1 has no negative PUBACK); a refused subscription gets 0x80.
//   - Connections are closed when their device is removed, when the credential they logged in
//     with is deleted or expires, and (optional mode) when a device that had none gets one.
// aedes speaks MQTT 3.1.1: an MQTT 5 client is told about its login in MQTT 5 terms (0x86),
// and otherwise that its protocol version is not supported (0x84).
// An accepted attrs message goes to the inbox (ingest); for QoS 1 the broker's PUBACK waits for
// its ack handle, i.e. for the commit (authorizePublish is the last step before aedes acks).
import { TLSSocket } from 'node:tls';
import type { AedesOptions, AuthenticateError, Client, ConnectPacket, PublishPacket, Subscription } from 'aedes';
import mqttPacket from 'mqtt-packet';
import type { DeviceAuthMode } from '../config.js';
import type { Logger } from '../log.js';
import type { RegistryEvent } from '../registry/events.js';
import type { DeviceLogin, LoginCheck, LoginStanding, LoginVerdict } from '../registry/credentials/logins.js';
import { NO_ACK, type AckHandle, type Inbox } from './link.js';
import { HeldKeepalives } from './held-keepalive.js';
import { attrsTopic, configTopic, mayPublish, maySubscribe } from './topic-rules.js';
import { deviceKey, deviceName, parseDeviceName, sameDevice, type DeviceRef } from '../topics.js';
import { atTime, type WallTimer } from '../wall-timer.js';

// The hooks' callbacks (aedes does not export their types).
type AuthenticateDone = (error: AuthenticateError | null, success: boolean | null) => void;
type PreConnectDone = (error: Error | null, success: boolean) => void;
/** authorizePublish's callback: aedes goes on with the publish (its PUBACK) once called. */
type PublishDone = (error?: Error | null) => void;
type SubscribeDone = (error: Error | null, subscription?: Subscription | null) => void;

/** The part of aedes' persistence (untyped by aedes) that holds sessions: subscriptions, QoS 2 messages awaiting their PUBREL. */
interface SessionStore {
  incomingGetPacket(client: Client, packet: PublishPacket): Promise<unknown>;
  cleanSubscriptions(client: { id: string }): Promise<void>;
  cleanIncoming?(client: { id: string }): Promise<void>;
}

/** What of aedes a client leads to: its sessions, and the connected clients by client id. */
interface SessionBroker {
  persistence: SessionStore;
  clients: Record<string, Client | undefined>;
}

/** aedes's wait for a client's socket to drain, bounded by its `drainTimeout` (60 s), past which it closes the connection; not in its typed API. */
interface Drainable {
  waitForDrain(callback: (err: Error | null) => void): void;
}

/**
 * Whether what was written to the client waits unread (its socket over its high-water mark).
 * aedes writes a PUBACK or PUBREC without looking at backpressure (mqtt-packet reports every
 * acknowledgement as written), so a device that publishes and never reads had aedes go on
 * reading and acknowledging, each unread PUBACK kept in memory for as long as the connection
 * lived (found by an audit: +180 MB for 1.4 M messages of one connection).
 */
function ackUnread(client: Client): boolean {
  // aedes types `conn` as its own Connection, without the stream's `writableNeedDrain` the socket has.
  return (client.conn as unknown as { writableNeedDrain?: boolean }).writableNeedDrain === true;
}

/** Goes on once the client has read its acknowledgements; aedes reads nothing more from it meanwhile, and closes it past its drain timeout. */
function whenAcksRead(client: Client, go: () => void, fail: PublishDone): void {
  (client as unknown as Drainable).waitForDrain((err) => (err ? fail(err) : go()));
}

/** What of aedes's client bounds the QoS 2 messages awaiting PUBREL; not in its typed API. */
interface Qos2Window {
  _inboundInflight: Set<number>;
  broker: { maxInflightInbound: number };
}
const QOS2_WINDOW_FULL = 'too many QoS 2 messages awaiting PUBREL';

/**
 * Takes the message's place in the client's QoS 2 window (aedes's maxInflightInbound, 1,000),
 * as aedes would after this hook, or says it is full. aedes refuses a message past the window
 * only after the hook, which takes it in and waits for its commit: the message was stored, got
 * no PUBREC, and was stored again when the device sent it again (found by an audit). The place
 * is taken at once, as aedes does it: a socket chunk's messages reach the hook together.
 */
function takeQos2Slot(client: Client, messageId: number | undefined): boolean {
  const { _inboundInflight: inflight, broker } = client as unknown as Qos2Window;
  if (!inflight || messageId === undefined) return true;
  const limit = broker.maxInflightInbound;
  if (limit > 0 && !inflight.has(messageId) && inflight.size >= limit) return false;
  inflight.add(messageId);
  return true;
}

/** CONNACK return codes (MQTT 3.1.1): 2 identifier rejected, 3 server unavailable, 4 bad user name or password, 5 not authorised. */
type ReturnCode = 2 | 3 | 4 | 5;
/** Their MQTT 5 reason codes. */
const REASON_CODE_V5: Record<ReturnCode, number> = { 2: 0x85, 3: 0x88, 4: 0x86, 5: 0x87 };
/** Client ids whose device is remembered (the oldest is forgotten past it). */
const OWNERS_CAPACITY = 250_000;
/**
 * Persistent sessions a device keeps under client ids that do not name it: aedes keeps a
 * persistent session (its subscriptions, its QoS 2 messages awaiting PUBREL) forever, so a
 * device logging in with ever new client ids would grow the broker's memory without bound.
 * Past it, the sessions of its oldest client ids not connected are dropped.
 */
export const SESSIONS_PER_DEVICE = 16;
const UNSUPPORTED_PROTOCOL_V5 = 0x84;
/** Why a connection checked again after missed registry events is closed. */
const NO_LONGER_HOLDS = 'its login no longer holds (registry changes were missed, then read again)';
/** Pause before a failed check of the connected devices is tried again. */
const RECHECK_RETRY_MS = 5000;
/** Connections checked per question to the registry (1,000 devices a query there). */
const RECHECK_SLICE = 10_000;

/** The ack handle of a QoS 1/2 message: lets aedes go on with the publish, which sends its PUBACK. */
class AuthorisedPublish implements AckHandle {
  constructor(
    private done: PublishDone | undefined,
    private readonly settled: () => void,
  ) {}

  ack(): void {
    const done = this.done;
    if (!done) return;
    this.done = undefined;
    this.settled();
    done(null);
  }
}

function refused(returnCode: ReturnCode, message: string): AuthenticateError {
  return Object.assign(new Error(message), { returnCode });
}

/** What a client presented in its CONNECT. */
interface Presented {
  clientId: string;
  username: string | undefined;
  password: Uint8Array | undefined;
  conn: unknown;
}

/** A login decision: accepted (naming its device, or not yet), or refused with a CONNACK code. */
type Decision =
  { accept: true; device: DeviceRef | undefined; verdict: LoginVerdict & { ok: true } } | { accept: false; code: ReturnCode; why: string };

/** A login being checked, and what the registry removed meanwhile. */
interface Checking {
  deviceRemoved: boolean;
  removedCredentials: Set<string>;
  /** (optional mode) The device got a credential: a login without one is outdated. */
  credentialAdded: boolean;
  /** Anything of its tenant may have changed (events were missed): the verdict is checked again. */
  tenantChanged: boolean;
}

/** A logged-in client: its device, the credential it used, the timer of that credential's expiry. */
interface Session {
  device: DeviceRef;
  credentialId: string | undefined;
  /** Logged in without any credential (MQTT_DEVICE_AUTH optional, a device that had none). */
  bare: boolean;
  expiry: WallTimer | undefined;
}

export class DeviceAuthorisation {
  private readonly identity = new WeakMap<Client, Session>();
  private readonly sessions = new Map<string, Set<Client>>();
  /** Shutdown: messages are no longer taken (see `hold`). */
  private holding = false;
  private readonly byCredential = new Map<string, Set<Client>>();
  /** The password of a client that named no device, until its first legacy topic names one. */
  private readonly unnamed = new WeakMap<Client, Uint8Array | undefined>();
  /** The keepalive checks held back while a client's publishes wait for their commit. */
  private readonly keepalives = new HeldKeepalives();
  /**
   * The device each client id logged in as (not with MQTT_DEVICE_AUTH=off): a client id, its
   * connection and its session (subscriptions, queued config messages) belong to one device, so
   * another client cannot take them over (aedes closes the connection holding a client id when
   * a new one logs in with it). A client id of the form `<tenant>:<id>` is that device's anyway.
   */
  private readonly owners = new Map<string, DeviceRef>();
  /** The client ids of `owners` by device, forgotten with the device. */
  private readonly ownedBy = new Map<string, Set<string>>();
  /** Clients that sent no client id (aedes made one up): nobody else can name it, and it is not kept. */
  private readonly madeUpIds = new WeakSet<Client>();
  /** QoS 2 messages being taken in, by client id and packet id: a resend waits for the first. */
  private readonly qos2Arriving = new Map<string, Promise<boolean>>();
  /**
   * Clients closed because their login no longer holds: aedes still runs their will through
   * authorizePublish, which must not check it as a new login of the device (no password left).
   */
  private readonly revoked = new WeakSet<Client>();
  /**
   * Logins being checked, by device: what the registry removes meanwhile (a slow hash takes tens
   * of milliseconds) would close nothing, the client not being bound yet, so it is applied to
   * the verdict when it arrives.
   */
  private readonly checking = new Map<string, Set<Checking>>();
  /** A failed `recheck` waiting to be tried again, by tenant (`*`: every tenant): one at a time. */
  private readonly rechecks = new Map<string, NodeJS.Timeout>();
  /** The `recheck` under way, by tenant; `again`: events came meanwhile, one more check follows. */
  private readonly rechecking = new Map<string, { again: boolean }>();
  /** The broker the clients belong to (known from the first one). */
  private broker: SessionBroker | undefined;

  constructor(
    private readonly logins: LoginCheck,
    private readonly mode: DeviceAuthMode,
    private readonly inbox: Inbox,
    private readonly log: Logger,
  ) {}

  /** The aedes hooks. */
  hooks(): Partial<AedesOptions> {
    return {
      preConnect: (client, packet, done) => this.preConnect(client, packet, done),
      authenticate: (client, username, password, done) => this.authenticate(client, username, password, done),
      authorizePublish: (client, packet, done) => this.authorizePublish(client, packet, done),
      authorizeSubscribe: (client, sub, done) => this.authorizeSubscribe(client, sub, done),
    };
  }

  /** MQTT 5 CONNECT: aedes would answer "unsupported protocol version" in 3.1.1 terms; the login is decided first and answered in MQTT 5 terms. */
  private preConnect(client: Client, packet: ConnectPacket, done: PreConnectDone): void {
    this.broker ??= (client as Client & { broker: SessionBroker }).broker;
    if (!packet.clientId) this.madeUpIds.add(client);
    if (packet.protocolVersion !== 5) return done(null, true);
    const presented = { clientId: packet.clientId, username: packet.username, password: packet.password, conn: client.conn };
    this.decide(presented, true).then(
      (d) => answerV5(client, d.accept ? UNSUPPORTED_PROTOCOL_V5 : REASON_CODE_V5[d.code], done),
      (err: Error) => {
        this.checkFailed(presented, err);
        answerV5(client, REASON_CODE_V5[3], done);
      },
    );
  }

  /** CONNECT (MQTT 3.1.1). */
  private authenticate(client: Client, username: string | undefined, password: Buffer | undefined, done: AuthenticateDone): void {
    const presented = { clientId: client.id, username, password, conn: client.conn };
    // Until its login is accepted the client holds no session: aedes, closing a client that asked
    // for a clean one, drops what its client id keeps (QoS 2 messages awaiting their PUBREL), and
    // a refused client (or one that hangs up while checked) must not do that to the device whose
    // client id it named.
    const clean = client.clean;
    client.clean = false;
    this.decide(presented).then(
      (d) => {
        if (!d.accept) return done(refused(d.code, d.why), false);
        client.clean = clean;
        if (d.device) this.bind(client, d.device, d.verdict);
        // Its password waits for the topic that names its device.
        else this.unnamed.set(client, password && password.length > 0 ? Buffer.from(password) : undefined);
        done(null, true);
      },
      (err: Error) => {
        this.checkFailed(presented, err);
        done(refused(3, 'server unavailable'), false);
      },
    );
  }

  /** The registry could not be asked (the database unreachable): logged with the device the client named, however it named it. */
  private checkFailed(p: Presented, err: Error): void {
    const device =
      p.username !== undefined && p.username !== ''
        ? parseDeviceName(p.username)
        : (certificateDevice(p.conn) ?? parseDeviceName(p.clientId) ?? this.ownerOf(p.clientId));
    this.log.warn('device login check failed; connection refused', {
      ...(device ? { tenant: device.tenant, device: device.id } : {}),
      error: err.message,
    });
  }

  /** Who the client says it is, and what the registry says of that (`answerOnly`: refused whatever it says, see DeviceLogin). */
  private async decide(p: Presented, answerOnly = false): Promise<Decision> {
    const certified = certificateDevice(p.conn);
    let device: DeviceRef | undefined;
    if (p.username !== undefined && p.username !== '') {
      device = parseDeviceName(p.username);
      if (!device) return this.refusedBefore('the username must be <tenant>:<device id>', p, {});
      if (certified && !sameDevice(certified, device))
        return this.refusedBefore('the username and the client certificate name different devices', p, { device, certified });
    } else {
      device = certified ?? parseDeviceName(p.clientId);
    }
    const owner = this.ownerOf(p.clientId);
    // A client naming no device is the device its client id belongs to (checked as that device).
    if (owner && !device) device = owner;
    else if (owner && device && !sameDevice(owner, device))
      return this.refusedBefore('the client id belongs to another device', p, { device, code: 2 });
    const verdict = await this.checked({
      device,
      password: p.password,
      certificate: certified !== undefined && device !== undefined && sameDevice(certified, device),
      address: remoteAddress(p.conn),
      ...(answerOnly ? { answerOnly } : {}),
    });
    if (verdict.ok) return { accept: true, device, verdict };
    // Every refusal is the same answer: it tells a guesser nothing.
    // With them off (today's behaviour) an unknown device is still "not authorised" (5).
    const code: ReturnCode = this.mode === 'off' && verdict.reason === 'unknown_device' ? 5 : 4;
    return { accept: false, code, why: code === 5 ? 'no such device' : 'bad user name or password' };
  }

  /**
   * A login refused before the registry is asked (docs/credentials.md §3: logged, not counted
   * by reason): the username is not a device name, or names another device than the client
   * certificate. `device`: the device the client named, `certified`: its certificate's device;
   * `code`: the CONNACK return code (2, identifier rejected, or 4, bad user name or password).
   */
  private refusedBefore(
    why: string,
    p: Presented,
    { device, certified, code = 4 }: { device?: DeviceRef; certified?: DeviceRef; code?: 2 | 4 },
  ): Decision {
    this.log.info('device login refused', {
      ...(device ? { tenant: device.tenant, device: device.id } : {}),
      reason: why,
      ...(certified ? { certificate: deviceName(certified.tenant, certified.id) } : {}),
      address: remoteAddress(p.conn),
    });
    return { accept: false, code, why };
  }

  /** The device a client id belongs to: the one it names, or the one that last logged in with it. */
  private ownerOf(clientId: string): DeviceRef | undefined {
    if (this.mode === 'off') return undefined;
    return parseDeviceName(clientId) ?? this.owners.get(clientId);
  }

  private own(client: Client, device: DeviceRef): void {
    const clientId = client.id;
    if (this.mode === 'off' || this.madeUpIds.has(client) || parseDeviceName(clientId)) return;
    this.disown(clientId);
    if (this.owners.size >= OWNERS_CAPACITY) this.dropSession(this.owners.keys().next().value!);
    this.owners.set(clientId, device);
    const ids = addTo(this.ownedBy, deviceKey(device.tenant, device.id), clientId);
    // Oldest first (a client id logging in again moves to the end).
    for (const id of [...ids]) {
      if (ids.size <= SESSIONS_PER_DEVICE) break;
      if (id !== clientId && !this.broker?.clients[id]) this.dropSession(id);
    }
  }

  /** Forgets a client id and drops the session aedes keeps under it (once its connection, if any, is gone). */
  private dropSession(clientId: string): void {
    this.disown(clientId);
    const broker = this.broker;
    if (!broker) return;
    const wipe = () => {
      broker.persistence.cleanSubscriptions({ id: clientId }).catch(() => undefined);
      broker.persistence.cleanIncoming?.({ id: clientId }).catch(() => undefined);
    };
    const holder = broker.clients[clientId];
    if (holder && !holder.conn.destroyed) holder.conn.once('close', wipe);
    else wipe();
  }

  private disown(clientId: string): void {
    const device = this.owners.get(clientId);
    if (!device) return;
    this.owners.delete(clientId);
    removeFrom(this.ownedBy, deviceKey(device.tenant, device.id), clientId);
  }

  /** PUBLISH: only to the client's own attrs topic (a legacy one may name it); anything else closes the connection. */
  private authorizePublish(client: Client | null, packet: PublishPacket, done: PublishDone): void {
    if (!client) return done(new Error('publishing without a client is not allowed'));
    if (this.revoked.has(client)) return done(new Error('its login no longer holds'));
    const topic = attrsTopic(packet.topic);
    if (!topic) return done(new Error(`devices may only publish to their attrs topic, not ${packet.topic}`));
    const session = this.identity.get(client);
    if (session) {
      if (!mayPublish(session.device, packet.topic))
        return done(new Error(`${deviceName(session.device.tenant, session.device.id)} may not publish to ${packet.topic}`));
      return this.handOver(client, topic, packet, done);
    }
    if (!topic.legacy) return done(new Error('default-mode topics need the username <tenant>:<device id>'));
    this.nameByTopic(client, topic).then(
      (ok) => (ok ? this.handOver(client, topic, packet, done) : done(new Error(`not allowed as ${deviceName(topic.tenant, topic.id)}`))),
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
  private handOver(client: Client, device: DeviceRef, packet: PublishPacket, done: PublishDone): void {
    if (this.holding) return;
    if (ackUnread(client)) return whenAcksRead(client, () => this.handOver(client, device, packet, done), done);
    // Not retained: no one may subscribe to an attrs topic, so aedes would keep the last message
    // of each (up to MAX_MESSAGE_BYTES) in memory for good, even after its device is removed.
    packet.retain = false;
    if (packet.qos === 2) return this.takeInQos2(client, device, packet, done);
    this.takeIn(client, device, packet, done);
  }

  /**
   * A QoS 2 message sent again before its PUBREL (the device missed the PUBREC) is the one
   * already taken in and committed (MQTT-4.3.3-2): aedes, which runs this hook before it looks,
   * finds it in the session and answers its PUBREC again; it is not taken in twice. One sent
   * again while the first is still waiting for its commit (the same socket chunk, or a
   * reconnect) waits for it and is not taken in either: before, found by an audit, aedes's
   * session did not hold it yet and it was stored again (842 of 1,000 sends of one packet id).
   */
  private takeInQos2(client: Client, device: DeviceRef, packet: PublishPacket, done: PublishDone): void {
    const key = `${client.id}\u0000${packet.messageId}`;
    const earlier = this.qos2Arriving.get(key);
    let settle!: (stored: boolean) => void;
    const mine = new Promise<boolean>((resolve) => (settle = resolve));
    this.qos2Arriving.set(key, mine);
    const finish = (err?: Error | null) => {
      if (this.qos2Arriving.get(key) === mine) this.qos2Arriving.delete(key);
      settle(!err);
      done(err);
    };
    const { persistence } = (client as Client & { broker: { persistence: SessionStore } }).broker;
    void (earlier ?? Promise.resolve(false)).then((stored) => {
      if (stored) return finish(null);
      persistence.incomingGetPacket(client, packet).then(
        () => finish(null),
        () => (takeQos2Slot(client, packet.messageId) ? this.takeIn(client, device, packet, finish) : finish(new Error(QOS2_WINDOW_FULL))),
      );
    });
  }

  private takeIn(client: Client, device: DeviceRef, packet: PublishPacket, done: PublishDone): void {
    if (this.holding) return;
    const payload = typeof packet.payload === 'string' ? Buffer.from(packet.payload) : packet.payload;
    if (packet.qos === 0) {
      done(null);
      this.inbox.accept(device.tenant, device.id, payload, NO_ACK);
    } else {
      this.inbox.accept(device.tenant, device.id, payload, new AuthorisedPublish(done, this.keepalives.hold(client)));
    }
  }

  /** SUBSCRIBE: only to the client's own config topic (a legacy one may name it); anything else is refused in the SUBACK. */
  private authorizeSubscribe(client: Client, sub: Subscription, done: SubscribeDone): void {
    const topic = configTopic(sub.topic);
    if (!client || !topic) return done(null, null);
    const session = this.identity.get(client);
    if (session) return done(null, maySubscribe(session.device, sub.topic) ? sub : null);
    if (!topic.legacy) return done(null, null);
    this.nameByTopic(client, topic).then(
      (ok) => done(null, ok ? sub : null),
      () => done(null, null),
    );
  }

  /** Forgets a client when it goes away. */
  disconnected(client: Client): void {
    this.keepalives.forget(client);
    const session = this.identity.get(client);
    if (!session) return;
    this.identity.delete(client);
    session.expiry?.cancel();
    const key = deviceKey(session.device.tenant, session.device.id);
    removeFrom(this.sessions, key, client);
    if (session.credentialId) removeFrom(this.byCredential, session.credentialId, client);
    // A clean session ends with its connection (MQTT-3.1.2-6): nothing of it is left to push
    // off or take over, so its client id is free again, unless a newer connection of the same
    // device holds it (a reconnect while the old connection lingered).
    const owner = this.owners.get(client.id);
    if (client.clean && owner && sameDevice(owner, session.device) && ![...(this.sessions.get(key) ?? [])].some((c) => c.id === client.id))
      this.disown(client.id);
  }

  /** Registry events: the connections a change ends are closed. */
  registryChanged(event: RegistryEvent): void {
    if (event.type === 'devices.removed') {
      for (const id of event.deviceIds) this.deviceRemoved({ tenant: event.tenant, id });
    } else if (event.type === 'tenant.changed') {
      for (const [key, set] of this.checking)
        if (event.tenant === '*' || key.startsWith(deviceKey(event.tenant, ''))) for (const c of set) c.tenantChanged = true;
      this.recheck(event.tenant);
    } else if (event.type === 'credentials.changed') {
      for (const c of this.checking.get(deviceKey(event.tenant, event.deviceId)) ?? []) {
        for (const id of event.removedIds) c.removedCredentials.add(id);
        if (event.removedIds.length === 0) c.credentialAdded = true;
      }
      for (const id of event.removedIds) this.close(this.byCredential.get(id), 'the credential it logged in with was deleted');
      // A device that gets its first credential must use it from now on (optional mode).
      if (this.mode === 'optional' && event.removedIds.length === 0) {
        const bare = [...(this.sessions.get(deviceKey(event.tenant, event.deviceId)) ?? [])].filter((c) => this.identity.get(c)?.bare);
        this.close(new Set(bare), 'its device now has a credential');
      }
    }
  }

  /** A device removed: its connections are closed, and its client ids freed. */
  private deviceRemoved(device: DeviceRef): void {
    const key = deviceKey(device.tenant, device.id);
    // Logins still being checked are refused when their verdict arrives (see `checked`).
    for (const c of this.checking.get(key) ?? []) c.deviceRemoved = true;
    this.close(this.sessions.get(key), 'its device was removed');
    // Its client ids are free for other devices, without its sessions (subscriptions to its
    // config topic, which a device created again with its id would receive).
    for (const clientId of [...(this.ownedBy.get(key) ?? []), deviceName(device.tenant, device.id)]) this.dropSession(clientId);
  }

  /**
   * Anything of `tenant` (`*`: of every tenant) may have changed, and no event names what: this
   * instance missed events while it could not listen (docs/credentials.md §3), or one was too
   * large to send. Every connection of the tenant is checked against the registry again, and
   * those whose login no longer holds (device removed, credential deleted or expired, a first
   * credential in optional mode) are closed. One check runs at a time per tenant: events that
   * come meanwhile make one more check once it ends. A check that fails (database unreachable)
   * is tried again later.
   */
  private recheck(tenant: string, retried = false): void {
    const running = this.rechecking.get(tenant);
    if (running) {
      running.again = true;
      return;
    }
    const state = { again: false };
    this.rechecking.set(tenant, state);
    this.recheckConnections(tenant)
      .then(
        () => {
          if (retried) this.log.info('checked the connected devices against the registry again', { tenant });
        },
        (err: Error) => {
          // Warned once, not at every retry of an outage.
          const fields = { tenant, error: err.message };
          if (retried) this.log.debug('could not check the connected devices against the registry; trying again', fields);
          else
            this.log.warn(
              `could not check the connected devices against the registry; trying again every ${RECHECK_RETRY_MS / 1000} s`,
              fields,
            );
          if (this.rechecks.has(tenant)) return;
          const retry = setTimeout(() => {
            this.rechecks.delete(tenant);
            this.recheck(tenant, true);
          }, RECHECK_RETRY_MS);
          retry.unref();
          this.rechecks.set(tenant, retry);
        },
      )
      .finally(() => {
        this.rechecking.delete(tenant);
        if (state.again) this.recheck(tenant);
      });
  }

  /**
   * The check of `recheck`: the connected clients, and the devices holding client ids without a
   * connection (their persistent sessions), RECHECK_SLICE a question to the registry (each
   * answered well within the bridge's time). A device found removed is forgotten as by its
   * event; a connection whose login lapsed is closed.
   */
  private async recheckConnections(tenant: string): Promise<void> {
    type Item = { client: Client; session: Session } | { owner: DeviceRef };
    const items: Item[] = [];
    const mine = (d: DeviceRef) => tenant === '*' || d.tenant === tenant;
    for (const set of this.sessions.values())
      for (const client of set) {
        const session = this.identity.get(client);
        if (session && mine(session.device)) items.push({ client, session });
      }
    for (const [key, ids] of this.ownedBy) {
      if (this.sessions.has(key)) continue;
      const owner = this.owners.get(ids.values().next().value!);
      if (owner && mine(owner)) items.push({ owner });
    }
    for (let i = 0; i < items.length; i += RECHECK_SLICE) {
      const slice = items.slice(i, i + RECHECK_SLICE);
      const standing = await this.logins.standing(
        slice.map((it) => {
          if ('owner' in it) return { device: it.owner, bare: false }; // (holds while the device exists)
          const s = it.session;
          return { device: s.device, ...(s.credentialId ? { credentialId: s.credentialId } : {}), bare: s.bare };
        }),
      );
      slice.forEach((it, j) => {
        if (standing[j] === 'holds') return;
        if ('owner' in it) return this.deviceRemoved(it.owner);
        // A connection gone meanwhile, or logged in again, is not this one any more.
        if (this.identity.get(it.client) !== it.session) return;
        if (standing[j] === 'device_removed') this.deviceRemoved(it.session.device);
        else this.close(new Set([it.client]), NO_LONGER_HOLDS);
      });
    }
  }

  private close(clients: Set<Client> | undefined, why: string): void {
    for (const client of [...(clients ?? [])]) {
      const session = this.identity.get(client);
      this.log.info('closing an MQTT connection', { why, tenant: session?.device.tenant, device: session?.device.id, client: client.id });
      this.revoked.add(client);
      this.disconnected(client);
      client.close();
    }
  }

  /** A client that named no device at CONNECT: the first legacy topic it uses names it, and its login is checked for that device. */
  private async nameByTopic(client: Client, topic: DeviceRef): Promise<boolean> {
    const verdict = await this.checked({
      device: { tenant: topic.tenant, id: topic.id },
      password: this.unnamed.get(client),
      address: remoteAddress(client.conn),
    });
    // Two messages may race to name the client: the first one wins.
    const session = this.identity.get(client);
    if (session) return sameDevice(session.device, topic);
    if (!verdict.ok) return false;
    const owner = this.ownerOf(client.id);
    if (owner && !sameDevice(owner, topic)) return false;
    this.unnamed.delete(client);
    this.bind(client, { tenant: topic.tenant, id: topic.id }, verdict);
    return true;
  }

  /**
   * The registry's verdict on a login, refused when what it accepted was removed while it was
   * checked: its device, the credential it matched, or (optional mode) a device without
   * credentials got its first one. The connection would otherwise last with it, closed by nothing.
   */
  private async checked(login: DeviceLogin): Promise<LoginVerdict> {
    const device = login.device;
    if (!device) return this.logins.check(login);
    const key = deviceKey(device.tenant, device.id);
    const pending: Checking = { deviceRemoved: false, removedCredentials: new Set(), credentialAdded: false, tenantChanged: false };
    addTo(this.checking, key, pending);
    let verdict: LoginVerdict;
    let standing: LoginStanding = 'holds';
    try {
      verdict = await this.logins.check(login.answerOnly ? login : { ...login, settledLater: true });
      // Events were missed while it was checked: what it was accepted with is read again, still
      // as a login being checked (a removal announced during that read refuses it too), and once
      // more should events be missed again meanwhile.
      while (verdict.ok && standing === 'holds' && pending.tenantChanged) {
        pending.tenantChanged = false;
        [standing = 'lapsed'] = await this.logins.standing([
          {
            device,
            ...(verdict.credentialId ? { credentialId: verdict.credentialId } : {}),
            bare: !verdict.credentialId && !login.certificate,
          },
        ]);
      }
    } finally {
      removeFrom(this.checking, key, pending);
    }
    if (!verdict.ok) return verdict;
    const settle = (outcome: LoginVerdict) => {
      if (!login.answerOnly) this.logins.settle(device, login.certificate === true, outcome);
      return outcome;
    };
    const bare = !verdict.credentialId && !login.certificate;
    const why = pending.deviceRemoved
      ? 'its device was removed while the login was checked'
      : verdict.credentialId && pending.removedCredentials.has(verdict.credentialId)
        ? 'the credential it presented was deleted while the login was checked'
        : this.mode === 'optional' && bare && pending.credentialAdded
          ? 'its device got a credential while the login was checked'
          : standing !== 'holds'
            ? NO_LONGER_HOLDS
            : undefined;
    if (why === undefined) return settle(verdict);
    this.log.info('device login refused', { tenant: device.tenant, device: device.id, reason: why, address: login.address });
    return settle({ ok: false, reason: pending.deviceRemoved || standing === 'device_removed' ? 'unknown_device' : 'wrong' });
  }

  private bind(client: Client, device: DeviceRef, verdict: LoginVerdict & { ok: true }): void {
    // A client that hung up while its login was checked is dropped by aedes without a
    // clientDisconnect: it is not bound, and one that hangs up later is forgotten with its socket.
    if (client.closed) return;
    client.conn.once('close', () => this.disconnected(client));
    const session: Session = {
      device,
      credentialId: verdict.credentialId,
      bare: !verdict.credentialId && !isCertified(client.conn, device),
      expiry: undefined,
    };
    if (verdict.expiresMs !== undefined) {
      // The credential expires while the connection lasts: the connection ends with it.
      session.expiry = atTime(verdict.expiresMs, () => this.close(new Set([client]), 'the credential it logged in with expired'));
    }
    this.identity.set(client, session);
    this.own(client, device);
    addTo(this.sessions, deviceKey(device.tenant, device.id), client);
    if (session.credentialId) addTo(this.byCredential, session.credentialId, client);
  }
}

/** Writes an MQTT 5 CONNACK with `reasonCode`, then lets aedes close the connection. */
function answerV5(client: Client, reasonCode: number, done: PreConnectDone): void {
  // aedes types `conn` as its own Connection; at runtime it is the client's writable stream.
  const conn = client.conn as unknown as NodeJS.WritableStream;
  const connack = mqttPacket.generate({ cmd: 'connack', reasonCode, sessionPresent: false }, { protocolVersion: 5 });
  const finish = () =>
    done(new Error(reasonCode === UNSUPPORTED_PROTOCOL_V5 ? 'the embedded broker speaks MQTT 3.1.1' : 'login refused'), false);
  try {
    conn.write(connack, finish);
  } catch {
    finish();
  }
}

/** The device a verified client certificate names (CN `<tenant>:<device_id>`), on the TLS listener with MQTT_TLS_CA. */
function certificateDevice(conn: unknown): DeviceRef | undefined {
  if (!(conn instanceof TLSSocket) || !conn.authorized) return undefined;
  const cn = conn.getPeerCertificate()?.subject?.CN;
  return typeof cn === 'string' ? parseDeviceName(cn) : undefined;
}

function isCertified(conn: unknown, device: DeviceRef): boolean {
  const certified = certificateDevice(conn);
  return certified !== undefined && sameDevice(certified, device);
}

function remoteAddress(conn: unknown): string | undefined {
  return (conn as { remoteAddress?: string } | undefined)?.remoteAddress;
}

/** Adds `item` to the set under `key` (made when missing); returns that set. */
function addTo<T>(map: Map<string, Set<T>>, key: string, item: T): Set<T> {
  let set = map.get(key);
  if (!set) map.set(key, (set = new Set()));
  set.add(item);
  return set;
}

/** Removes `item` from the set under `key`, and the set once empty. */
function removeFrom<T>(map: Map<string, Set<T>>, key: string, item: T): void {
  const set = map.get(key);
  set?.delete(item);
  if (set && set.size === 0) map.delete(key);
}
