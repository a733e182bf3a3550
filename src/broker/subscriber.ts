// One ingest subscriber connection to an external broker, written on mqtt-packet (the codec
// mqtt.js and aedes use). Why not mqtt.js itself: mqtt.js handles one incoming packet at a
// time and, with `customHandleAcks`, only reads the next packet after the previous one was
// acknowledged, so acknowledging after the database commit would serialise a connection to
// one message per commit. Here acknowledgements are decoupled from reading: every PUBLISH is
// handed over at once with its ack handle, and PUBACK goes out when the caller uses it.
//
// Session: fixed client id, clean start off, a session expiry (MQTT 5) or a persistent session
// (3.1.1), so the broker keeps the subscription and queues messages while the service is away
// and redelivers unacknowledged ones after a reconnect. An ack from before a reconnect is
// never sent on the new connection: packet ids are reused, and the broker redelivers that
// message anyway (at least once). A connection can also leave its subscription (`unsubscribe`,
// or from the start with `drain`): the broker adds nothing more to the session, and hands over
// what it had queued and in flight; `quietMs` tells when that is done (session-drain.ts). The
// client ids are leased (session-leases.ts): `mayReconnect` keeps a connection from taking a
// session back once its lease is gone. The MQTT 5 subscription asks for no retained messages
// (Retain Handling 2): a broker's retained copy is a message taken in when it came, and the
// subscription is made at every connect. MQTT 3.1.1 has no such option, and the retain flag
// cannot tell a copy from a queued message (aedes queues messages for an offline session with
// the flag as published): there a retained message is taken in again at each subscription.
//
// PUBACKs go out in the order the messages arrived on the connection, whatever order the
// caller acknowledges them in (shards commit independently): a message acknowledged early waits
// until every earlier one is acknowledged too. Brokers keep a connection's in-flight messages
// in arrival order and look an acknowledged one up from the oldest (Mosquitto 2 walks a linked
// list), so out-of-order PUBACKs cost the broker a walk past every older in-flight message,
// a cost that grows with what is in flight. The price: a message whose shard is stalled holds
// back the PUBACKs of later messages on its connection (already committed; a crash then means
// redelivery, i.e. duplicates, never loss). Stalls are database-wide in practice (an outage),
// when every shard waits anyway. A clean stop (close) sends those held back out of order.
import net from 'node:net';
import tls from 'node:tls';
import { EventEmitter } from 'node:events';
import mqttPacket from 'mqtt-packet';
import type { IConnackPacket, IPubrelPacket, ISubackPacket, Packet } from 'mqtt-packet';
import type { Logger } from '../log.js';
import { brokerLogin } from './broker-url.js';
import { NO_ACK, type AckHandle } from './link.js';

/** How long the first connection waits for the broker's CONNACK before the start fails. */
const FIRST_CONNACK_MS = 10_000;
/**
 * While the broker cannot be reached (connections refused: it is restarting), and for the first
 * FAST_RETRY_FOR_MS of any absence, reconnect every FAST_RETRY_MS: a restarted Mosquitto does
 * not restore shared subscriptions, and drops what devices publish until the subscribers are
 * back, so they must be back first, however long it was away. A refused connection costs
 * nothing. When the broker accepts the connection but not the subscriber, the delay doubles
 * from 250 ms to 5 s; a broker that refuses the subscriber's login gets that path at once.
 */
const FAST_RETRY_MS = 100;
const FAST_RETRY_FOR_MS = 5000;

export type MqttVersion = 4 | 5;

export interface SubscriberOptions {
  url: string;
  clientId: string;
  version: MqttVersion;
  /** Subscription filters (already prefixed with `$share/<group>/` where wanted). */
  filters: string[];
  sessionExpirySeconds: number;
  receiveMaximum: number;
  keepaliveSeconds?: number;
  /** Sent as Maximum Packet Size (MQTT 5): the broker sends nothing larger (it drops such a message for this session). */
  maxPacketBytes?: number;
  log: Logger;
  /** Unsubscribe from `filters` on connecting instead of subscribing: take what the session holds, and no more. */
  drain?: boolean;
  /** Filters of an earlier subscription of the session (another share group) to drop once subscribed. */
  staleFilters?: string[];
  /** Asked before every reconnect: false waits (the client id's lease is not ours now). */
  mayReconnect?: () => boolean;
  /**
   * Called for every PUBLISH. `payload` is a view into the socket's buffer, valid during the
   * call only (copy it). `ack.ack()` sends the PUBACK later (nothing for QoS 0).
   */
  onMessage(topic: string, payload: Buffer, ack: AckHandle): void;
  /**
   * Called for a PUBLISH announcing more than `maxPacketBytes` (a broker that was not told the
   * limit: MQTT 3.1.1), as soon as its packet id is in: the message is dropped, `ack` acknowledges
   * it. The rest of the packet is skipped as it arrives, never held. Without it, it is
   * acknowledged at once.
   */
  onTooLarge?(ack: AckHandle): void;
}

/** The broker refused the protocol version (CONNACK 1 / reason 0x84) or hung up on CONNECT. */
export class ProtocolRefused extends Error {
  constructor(version: MqttVersion) {
    super(`the broker does not accept MQTT ${version === 5 ? '5' : '3.1.1'}`);
    this.name = 'ProtocolRefused';
  }
}

/** CONNACK refusals by code: MQTT 5 reason codes, MQTT 3.1.1 return codes. */
const REFUSALS: Record<MqttVersion, Record<number, string>> = {
  5: {
    0x80: 'unspecified error',
    0x81: 'malformed packet',
    0x82: 'protocol error',
    0x83: 'implementation specific error',
    0x85: 'client identifier not valid',
    0x86: 'bad user name or password',
    0x87: 'not authorized',
    0x88: 'server unavailable',
    0x89: 'server busy',
    0x8a: 'banned',
    0x8c: 'bad authentication method',
    0x95: 'packet too large',
    0x97: 'quota exceeded',
    0x9f: 'connection rate exceeded',
  },
  4: { 2: 'identifier rejected', 3: 'server unavailable', 4: 'bad user name or password', 5: 'not authorized' },
};
/** The refusals of the login (MQTT_URL's user name and password), and of the client id (MQTT_CLIENT_ID). */
const LOGIN_REFUSED: Record<MqttVersion, number[]> = { 5: [0x86, 0x87], 4: [4, 5] };
const CLIENT_ID_REFUSED: Record<MqttVersion, number[]> = { 5: [0x85], 4: [2] };

/**
 * The broker refused the CONNECT: the line names the broker, MQTT_URL, the reason and what to
 * check (before, found by an audit: 'the broker refused the connection (code 134)' alone).
 */
class ConnectRefused extends Error {
  constructor(
    readonly code: number,
    version: MqttVersion,
    host: string,
  ) {
    const login = LOGIN_REFUSED[version].includes(code);
    const hint = login
      ? '; check the user name and password in MQTT_URL'
      : CLIENT_ID_REFUSED[version].includes(code)
        ? '; check MQTT_CLIENT_ID'
        : '';
    super(
      `the broker at ${host} (MQTT_URL) refused the ${login ? 'login' : 'connection'}: ${REFUSALS[version][code] ?? 'refused'} (code ${code})${hint}`,
    );
    this.name = 'ConnectRefused';
  }
}

/** One network connection to the broker; a reconnect makes a new one. */
interface Wire {
  /** Increases with every network connection; acks carry the generation they belong to. */
  readonly generation: number;
  readonly socket: net.Socket;
  /** Other packets than PUBLISH (few) go through mqtt-packet, one complete frame at a time. */
  readonly parser: mqttPacket.Parser;
  tcpConnected: boolean;
  connackSeen: boolean;
  error: Error | undefined;
}

/**
 * The ack handle of one QoS 1/2 message: bound to its network connection, its packet id and its
 * arrival (a number no other message of the connection has), used once. A packet id is reused
 * by the broker once acknowledged, so the id alone could name a later message: a handle whose
 * arrival is no longer the id's current one sends nothing.
 */
class InflightAck implements AckHandle {
  constructor(
    private connection: SubscriberConnection | undefined,
    private readonly generation: number,
    private readonly qos: number,
    private readonly packetId: number,
    private readonly arrival: number,
  ) {}

  ack(): void {
    const connection = this.connection;
    if (!connection) return;
    this.connection = undefined;
    connection.acknowledge(this.generation, this.qos, this.packetId, this.arrival);
  }
}

export class SubscriberConnection extends EventEmitter {
  private socket: net.Socket | undefined;
  /** The generation of the current network connection (Wire.generation). */
  private generation = 0;
  private connected = false;
  /** CONNACK accepted on the current network connection. */
  private sessionOpen = false;
  private closing = false;
  private paused = false;
  /** Unsubscribe (rather than subscribe) on every connect from now on; resolved at the UNSUBACK. */
  private leaving: { done: Promise<void>; resolve: () => void } | undefined;
  /** When a message last came in, or reading resumed (performance.now()). */
  private lastActivity = 0;
  private reconnectDelay = 250;
  /** Since when the broker has been away (performance.now()); undefined while connected. */
  private awaySince: number | undefined;
  /** The broker answered the last attempt with a refusal (not worth retrying fast). */
  private refused = false;
  private reconnected = 0;
  private everConnected = false;
  private reconnectTimer: NodeJS.Timeout | undefined;
  private pingTimer: NodeJS.Timeout | undefined;
  private lastReceived = 0;
  /** QoS 1 packet ids of this network connection in arrival order: a ring of `inflight` ids from `head`. */
  private readonly arrivals = new Uint16Array(65536);
  private head = 0;
  private inflight = 0;
  /** Per packet id: 0 not in flight, 1 waiting for its ack, 2 acknowledged (its PUBACK waits for older ones). */
  private readonly state = new Uint8Array(65536);
  /** Per packet id in flight: the arrival number of the message it names now (see InflightAck). */
  private readonly arrivalOf = new Uint32Array(65536);
  /** The last arrival number given (0 is none: a handle with it acknowledges nothing). */
  private arrivalCount = 0;
  private flushScheduled = false;
  /** An incomplete packet from the previous chunk. */
  private rest: Buffer | undefined;
  /** Bytes still to come of a PUBLISH over `maxPacketBytes` already handed over: skipped. */
  private skip = 0;
  private firstConnect: { resolve: () => void; reject: (err: Error) => void } | undefined;
  private readonly keepalive: number;
  private readonly url: URL;

  constructor(private readonly opts: SubscriberOptions) {
    super();
    this.keepalive = opts.keepaliveSeconds ?? 30;
    this.url = new URL(opts.url);
    if (opts.drain) this.leaving = settlement();
  }

  get isConnected(): boolean {
    return this.connected;
  }

  /** Connects and subscribes; rejects if the first attempt fails (later drops reconnect by themselves). */
  start(): Promise<void> {
    return new Promise((resolve, reject) => {
      this.firstConnect = { resolve, reject };
      this.connect();
    });
  }

  /** How often the connection lost the broker and connected again (a session resumed). */
  get reconnects(): number {
    return this.reconnected;
  }

  /**
   * Stops reading from the broker (backpressure); acks and pings still go out. Unread, the
   * broker's PINGRESPs wait in the socket, so while paused the broker's liveness is TCP's
   * business (keepalive probes, see open()), not the MQTT keepalive's: a paused connection
   * would otherwise hang up on a live broker and reconnect in a loop, and every reconnect
   * forgets the acks it had pending (the broker sends those messages again: duplicates).
   */
  pause(): void {
    this.paused = true;
    this.socket?.pause();
  }

  resume(): void {
    this.paused = false;
    this.lastActivity = performance.now();
    // Whatever the broker said meanwhile is read now: its silence counts from here.
    this.lastReceived = Date.now();
    this.socket?.resume();
  }

  /**
   * Leaves the subscription (now, and on every reconnect): the broker routes nothing more to
   * this session, and still hands over what it had queued. Resolves at the broker's UNSUBACK.
   */
  unsubscribe(): Promise<void> {
    if (this.leaving) return this.leaving.done;
    this.leaving = settlement();
    if (this.sessionOpen) this.write(this.unsubscribePacket(this.opts.filters, UNSUBSCRIBE_ID));
    return this.leaving.done;
  }

  /**
   * How long (ms) the connection has been unsubscribed, reading, with nothing in flight and
   * nothing coming in; 0 while any of that is not so. Past a second or two, the broker has
   * handed over everything the session held.
   */
  quietMs(): number {
    if (!this.leaving || !this.connected || this.paused || this.inflight > 0) return 0;
    return performance.now() - this.lastActivity;
  }

  /** Hangs up without a word and never reconnects (the session is someone else's now). */
  abandon(): void {
    this.closing = true;
    clearTimeout(this.reconnectTimer);
    clearInterval(this.pingTimer);
    this.socket?.destroy();
  }

  /** Sends DISCONNECT (the session stays) and closes. */
  async close(): Promise<void> {
    this.closing = true;
    clearTimeout(this.reconnectTimer);
    clearInterval(this.pingTimer);
    const socket = this.socket;
    if (!socket || socket.destroyed) return;
    await new Promise<void>((resolve) => {
      socket.once('close', () => resolve());
      // Read again (a paused socket never sees the broker's close), say goodbye, hang up.
      socket.resume();
      if (this.sessionOpen) {
        this.flushAcks();
        this.flushAcksOutOfOrder();
        // Reason 0 keeps the session (MQTT 5 would drop it only with a session expiry of 0).
        socket.end(mqttPacket.generate({ cmd: 'disconnect' }, { protocolVersion: this.opts.version }));
      } else {
        socket.destroy();
      }
      setTimeout(() => socket.destroy(), 2000).unref();
    });
  }

  /**
   * Sends the PUBACK (PUBREC for QoS 2) of a message, unless its network connection is gone.
   * Only a message's InflightAck calls this.
   */
  acknowledge(generation: number, qos: number, id: number, arrival: number): void {
    if (generation !== this.generation || !this.sessionOpen || !this.socket) return;
    if (qos === 2) {
      this.write(Buffer.from([0x50, 0x02, id >> 8, id & 0xff]));
      return;
    }
    // Not the message the id names now (a copy sent again while it was in flight, or an id reused since).
    if (this.state[id] !== 1 || this.arrivalOf[id] !== arrival) return;
    this.state[id] = 2;
    if (!this.flushScheduled && this.arrivals[this.head] === id) {
      this.flushScheduled = true;
      process.nextTick(() => this.flushAcks());
    }
  }

  // ---- connecting ---------------------------------------------------------------------------

  private connect(): void {
    const wire = this.open();
    wire.parser.on('packet', (packet: Packet) => this.onPacket(wire, packet));
    wire.parser.on('error', (err: Error) => {
      this.opts.log.warn('malformed packet from the broker; reconnecting', { client: this.opts.clientId, error: err.message });
      wire.socket.destroy();
    });
    wire.socket.on(this.isTls() ? 'secureConnect' : 'connect', () => this.onTransportReady(wire));
    wire.socket.on('data', (chunk: Buffer) => this.onData(wire, chunk));
    wire.socket.on('error', (err) => (wire.error = err));
    wire.socket.on('close', () => this.onClose(wire));
  }

  /** Opens a network connection; the in-flight messages of the previous one are forgotten (the broker sends them again). */
  private open(): Wire {
    const generation = ++this.generation;
    const port = Number(this.url.port || (this.isTls() ? 8883 : 1883));
    const host = this.url.hostname;
    const socket = this.isTls() ? tls.connect({ host, port, servername: host }) : net.connect({ host, port });
    socket.setNoDelay(true);
    // Probes a silent peer after the keepalive interval: a dead broker (or path) is noticed even
    // while the connection is paused and reads nothing (the MQTT keepalive cannot tell then).
    socket.setKeepAlive(true, this.keepalive * 1000);
    this.socket = socket;
    this.rest = undefined;
    this.skip = 0;
    this.sessionOpen = false;
    this.head = 0;
    this.inflight = 0;
    this.state.fill(0);
    const parser = mqttPacket.parser({ protocolVersion: this.opts.version });
    return { generation, socket, parser, tcpConnected: false, connackSeen: false, error: undefined };
  }

  /** TCP (or TLS) is up: CONNECT, and watch that the broker answers. */
  private onTransportReady(wire: Wire): void {
    wire.tcpConnected = true;
    this.write(this.connectPacket());
    this.lastReceived = Date.now();
    if (this.firstConnect) {
      // Something that accepts TCP but never answers MQTT: say so rather than wait for keepalive.
      setTimeout(() => {
        if (wire.connackSeen || !this.firstConnect) return;
        this.failConnect(new Error(`no MQTT answer from ${this.url.host} within ${FIRST_CONNACK_MS / 1000} s (MQTT_URL)`));
        wire.socket.destroy();
      }, FIRST_CONNACK_MS).unref();
    }
    clearInterval(this.pingTimer);
    this.pingTimer = setInterval(() => this.keepAlive(wire.socket), (this.keepalive * 1000) / 2);
    this.pingTimer.unref();
    if (this.paused) wire.socket.pause();
  }

  private connectPacket(): Buffer {
    const properties =
      this.opts.version === 5
        ? {
            sessionExpiryInterval: this.opts.sessionExpirySeconds,
            receiveMaximum: this.opts.receiveMaximum,
            ...(this.opts.maxPacketBytes !== undefined ? { maximumPacketSize: this.opts.maxPacketBytes } : {}),
          }
        : undefined;
    const { username, password } = brokerLogin(this.opts.url);
    return mqttPacket.generate(
      {
        cmd: 'connect',
        protocolId: 'MQTT',
        protocolVersion: this.opts.version,
        clientId: this.opts.clientId,
        clean: false,
        keepalive: this.keepalive,
        ...(username !== undefined ? { username } : {}),
        ...(password !== undefined ? { password: Buffer.from(password) } : {}),
        ...(properties ? { properties } : {}),
      },
      { protocolVersion: this.opts.version },
    );
  }

  private onData(wire: Wire, chunk: Buffer): void {
    this.lastReceived = Date.now();
    this.lastActivity = performance.now();
    if (!this.frames(chunk, wire)) {
      this.opts.log.warn('malformed packet from the broker; reconnecting', { client: this.opts.clientId });
      wire.socket.destroy();
    }
  }

  private onClose(wire: Wire): void {
    clearInterval(this.pingTimer);
    if (this.socket === wire.socket) {
      this.sessionOpen = false;
      this.socket = undefined;
    }
    const wasConnected = this.connected;
    this.connected = false;
    if (wasConnected && !this.closing) this.emit('disconnected');
    if (this.firstConnect) {
      // Connected but no CONNACK at all: a broker that cannot parse this protocol version hangs up.
      this.failConnect(
        !wire.tcpConnected
          ? new Error(`cannot reach the broker at ${this.url.host} (MQTT_URL): ${wire.error?.message ?? 'connection closed'}`)
          : wire.connackSeen
            ? new Error('the connection closed before the subscription was confirmed')
            : new ProtocolRefused(this.opts.version),
      );
      return;
    }
    if (!this.closing) this.scheduleReconnect(!wire.tcpConnected);
  }

  private failConnect(err: Error): void {
    if (this.firstConnect) {
      const { reject } = this.firstConnect;
      this.firstConnect = undefined;
      this.closing = true;
      reject(err);
    } else {
      this.refused = true;
      this.opts.log.warn('broker refused the ingest subscriber', { client: this.opts.clientId, error: err.message });
    }
  }

  /** `unreachable`: the last attempt did not even connect (the broker is down or restarting). */
  private scheduleReconnect(unreachable = false): void {
    clearTimeout(this.reconnectTimer);
    this.awaySince ??= performance.now();
    const fast = !this.refused && (unreachable || performance.now() - this.awaySince < FAST_RETRY_FOR_MS);
    this.reconnectTimer = setTimeout(
      () => {
        if (this.closing) return;
        if (this.opts.mayReconnect && !this.opts.mayReconnect()) {
          this.opts.log.warn('not reconnecting: this client id is not leased to this instance now', { client: this.opts.clientId });
          this.scheduleReconnect();
          return;
        }
        this.connect();
      },
      fast ? FAST_RETRY_MS : this.reconnectDelay,
    );
    if (!fast) this.reconnectDelay = Math.min(this.reconnectDelay * 2, 5000);
  }

  private keepAlive(socket: net.Socket): void {
    // Paused, nothing is read, PINGRESPs included: no verdict on the broker's silence then.
    if (!this.paused && Date.now() - this.lastReceived > this.keepalive * 1500) {
      this.opts.log.warn('broker stopped answering; reconnecting', { client: this.opts.clientId });
      socket.destroy();
      return;
    }
    if (this.connected) this.write(PINGREQ);
  }

  // ---- packets from the broker (PUBLISH aside) ----------------------------------------------

  private onPacket(wire: Wire, packet: Packet): void {
    switch (packet.cmd) {
      case 'connack':
        return this.onConnack(wire, packet);
      case 'suback':
        return this.onSuback(wire, packet);
      case 'unsuback':
        return this.onUnsuback(packet.messageId);
      case 'pubrel':
        return this.onPubrel(packet);
      case 'disconnect':
        // 0x8E: another connection took this client id's session over.
        this.opts.log.warn('the broker closed the ingest subscriber', { client: this.opts.clientId, reason: packet.reasonCode ?? 0 });
        wire.socket.destroy();
        return;
      default:
        return;
    }
  }

  /** CONNACK: refused (the start fails, or a reconnect follows), or the session is open: subscribe. */
  private onConnack(wire: Wire, packet: IConnackPacket): void {
    wire.connackSeen = true;
    const code = (this.opts.version === 5 ? packet.reasonCode : packet.returnCode) ?? 0;
    if (code !== 0) {
      this.failConnect(
        code === 1 || code === 0x84 ? new ProtocolRefused(this.opts.version) : new ConnectRefused(code, this.opts.version, this.url.host),
      );
      wire.socket.destroy();
      return;
    }
    // The session is open: a resumed session's unacknowledged messages come at once, even
    // before the SUBACK, and may be acknowledged from now on.
    this.sessionOpen = true;
    if (this.leaving) {
      this.write(this.unsubscribePacket(this.opts.filters, UNSUBSCRIBE_ID));
      return;
    }
    // MQTT 5: Retain Handling 2, no retained messages at the subscription (see the head of this file).
    const options = this.opts.version === 5 ? { rh: 2 } : {};
    this.write(
      mqttPacket.generate(
        { cmd: 'subscribe', messageId: 1, subscriptions: this.opts.filters.map((topic) => ({ topic, qos: 1 as const, ...options })) },
        { protocolVersion: this.opts.version },
      ),
    );
  }

  private unsubscribePacket(filters: string[], messageId: number): Buffer {
    return mqttPacket.generate({ cmd: 'unsubscribe', messageId, unsubscriptions: filters }, { protocolVersion: this.opts.version });
  }

  /** UNSUBACK: of the stale filters (nothing to do), or of the subscription this connection left (connected, in drain mode). */
  private onUnsuback(messageId: number | undefined): void {
    if (messageId !== UNSUBSCRIBE_ID || !this.leaving) return;
    this.lastActivity = performance.now();
    this.leaving.resolve();
    if (!this.connected) this.markConnected();
  }

  /** SUBACK: every filter granted means connected (the first start resolves); a refusal fails. */
  private onSuback(wire: Wire, packet: ISubackPacket): void {
    const refused = (packet.granted as Array<number | { qos: number }>).filter((g) => (typeof g === 'number' ? g : g.qos) >= 0x80);
    if (refused.length > 0) {
      this.failConnect(new Error(`the broker refused the subscription to ${this.opts.filters.join(', ')}`));
      wire.socket.destroy();
      return;
    }
    if (this.opts.staleFilters?.length) {
      this.write(this.unsubscribePacket(this.opts.staleFilters, STALE_UNSUBSCRIBE_ID));
      this.opts.staleFilters = undefined;
    }
    this.markConnected();
  }

  private markConnected(): void {
    if (this.everConnected) this.reconnected++;
    this.everConnected = true;
    this.connected = true;
    this.reconnectDelay = 250;
    this.awaySince = undefined;
    this.refused = false;
    this.emit('connected');
    if (this.firstConnect) {
      this.firstConnect.resolve();
      this.firstConnect = undefined;
    }
  }

  /** QoS 2 is not subscribed; answer PUBREL all the same to keep a misbehaving broker happy. */
  private onPubrel(packet: IPubrelPacket): void {
    this.write(mqttPacket.generate({ cmd: 'pubcomp', messageId: packet.messageId }, { protocolVersion: this.opts.version }));
  }

  // ---- PUBLISH: the hot path ----------------------------------------------------------------

  /**
   * Splits a chunk into MQTT frames. PUBLISH is decoded here without copies (the hot path);
   * anything else goes to mqtt-packet. Returns false on a malformed frame.
   */
  private frames(chunk: Buffer, wire: Wire): boolean {
    let buf = chunk;
    if (this.skip > 0) {
      if (chunk.length <= this.skip) {
        this.skip -= chunk.length;
        return true;
      }
      buf = chunk.subarray(this.skip);
      this.skip = 0;
    }
    if (this.rest) {
      buf = Buffer.concat([this.rest, buf]);
      this.rest = undefined;
    }
    let i = 0;
    const n = buf.length;
    while (n - i >= 2) {
      const header = buf[i]!;
      if (!readVarint(buf, i + 1, n, varint)) {
        if (varint.next - i > 4) return false;
        break; // the length itself is incomplete
      }
      const end = varint.next + varint.value;
      if (this.opts.maxPacketBytes !== undefined && end - i > this.opts.maxPacketBytes) {
        // Never gathered (MAX_MESSAGE_BYTES bounds what the service holds): a PUBLISH is dropped
        // once its packet id is in, the rest skipped; any other packet that large is malformed.
        if (header >> 4 !== 3) return false;
        const taken = this.tooLarge(buf, header, varint.next, end, n, wire.generation);
        if (taken === undefined) return false;
        if (!taken) break; // its topic and packet id are not all in yet (at most ~64 KiB)
        if (end > n) {
          this.skip = end - n;
          i = n;
          break;
        }
        i = end;
        continue;
      }
      if (end > n) break;
      if (header >> 4 === 3) {
        if (!this.publish(buf, header, varint.next, end, wire.generation)) return false;
      } else {
        wire.parser.parse(buf.subarray(i, end));
      }
      i = end;
    }
    if (i < n) this.rest = Buffer.from(buf.subarray(i));
    return true;
  }

  /** The PUBLISH frame whose variable header starts at `start`: handed over with its ack handle. False if malformed. */
  private publish(buf: Buffer, header: number, start: number, end: number, generation: number): boolean {
    // Closing: close() reads the socket again only to see the broker's close. A message read now
    // could be committed only after the DISCONNECT, its PUBACK never sent: the broker delivers it
    // again, so it is left to the session (before, found by an audit, it was stored twice).
    if (this.closing) return true;
    const qos = (header >> 1) & 3;
    // Every read below stays inside the frame: a short one is malformed, never a throw (in the
    // socket's data handler a throw would end the process).
    if (qos === 3 || end - start < 2) return false;
    let p = start + 2 + buf.readUInt16BE(start);
    if (p + (qos > 0 ? 2 : 0) > end) return false;
    const topic = buf.toString('utf8', start + 2, p);
    let ack = NO_ACK;
    if (qos > 0) {
      const id = buf.readUInt16BE(p);
      p += 2;
      ack = new InflightAck(this, generation, qos, id, qos === 1 ? this.track(id) : 0);
    }
    if (this.opts.version === 5) {
      // Skip the properties (no topic aliases: none were offered to the broker). A length that
      // does not end inside the frame, or properties running past it, are malformed.
      if (!readVarint(buf, p, end, varint)) return false;
      p = varint.next + varint.value;
    }
    if (p > end) return false;
    this.opts.onMessage(topic, buf.subarray(p, end), ack);
    return true;
  }

  /**
   * A PUBLISH over `maxPacketBytes` whose variable header starts at `start` (`avail` bytes of the
   * buffer read so far): dropped with its ack handle once its packet id is in (true), not yet
   * (false), or malformed (undefined).
   */
  private tooLarge(buf: Buffer, header: number, start: number, end: number, avail: number, generation: number): boolean | undefined {
    const qos = (header >> 1) & 3;
    if (qos === 3) return undefined;
    if (avail - start < 2) return false;
    const p = start + 2 + buf.readUInt16BE(start);
    const need = p + (qos > 0 ? 2 : 0);
    if (need > end) return undefined;
    if (need > avail) return false;
    // Closing: left to the session, as in publish().
    if (this.closing) return true;
    let ack = NO_ACK;
    if (qos > 0) {
      const id = buf.readUInt16BE(p);
      ack = new InflightAck(this, generation, qos, id, qos === 1 ? this.track(id) : 0);
    }
    if (this.opts.onTooLarge) this.opts.onTooLarge(ack);
    else ack.ack();
    return true;
  }

  /**
   * A QoS 1 message joins the arrival order; returns its arrival number. An id already in flight
   * would be a broker resending on the same connection, which MQTT forbids: the first copy's
   * PUBACK answers both, and the second copy's handle acknowledges nothing (0).
   */
  private track(id: number): number {
    if (this.state[id] !== 0) return 0;
    this.state[id] = 1;
    this.arrivalCount = this.arrivalCount === 0xffffffff ? 1 : this.arrivalCount + 1;
    this.arrivalOf[id] = this.arrivalCount;
    this.arrivals[(this.head + this.inflight) & 0xffff] = id;
    this.inflight++;
    return this.arrivalCount;
  }

  /**
   * One write with the PUBACKs of the acknowledged messages at the head of the arrival order
   * (those behind an unacknowledged one wait for it).
   */
  private flushAcks(): void {
    this.flushScheduled = false;
    let n = 0;
    while (n < this.inflight && this.state[this.arrivals[(this.head + n) & 0xffff]!] === 2) n++;
    if (n === 0) return;
    const out = Buffer.allocUnsafe(n * 4);
    for (let k = 0; k < n; k++) {
      const id = this.arrivals[this.head]!;
      this.state[id] = 0;
      this.head = (this.head + 1) & 0xffff;
      writePuback(out, k, id);
    }
    this.inflight -= n;
    this.write(out);
  }

  /**
   * At a clean stop: the PUBACKs of the acknowledged messages still waiting behind an older one
   * (its shard did not commit in time), out of order. Held back, they were never sent, and the
   * next instance stored those committed messages a second time (found by an audit). The older
   * ones stay unacknowledged and are delivered again.
   */
  private flushAcksOutOfOrder(): void {
    const ids: number[] = [];
    for (let k = 0; k < this.inflight; k++) {
      const id = this.arrivals[(this.head + k) & 0xffff]!;
      if (this.state[id] === 2) ids.push(id);
    }
    if (ids.length === 0) return;
    const out = Buffer.allocUnsafe(ids.length * 4);
    ids.forEach((id, k) => {
      // Not in flight any more: no later use of its handle can answer for it again.
      this.state[id] = 0;
      writePuback(out, k, id);
    });
    this.write(out);
  }

  private write(buf: Buffer): void {
    const socket = this.socket;
    if (!socket || socket.destroyed) return;
    socket.write(buf);
  }

  private isTls(): boolean {
    return this.url.protocol === 'mqtts:' || this.url.protocol === 'ssl:';
  }
}

const PINGREQ = Buffer.from([0xc0, 0x00]);

/** The `k`-th 4-byte PUBACK of `out`, for packet id `id`: with reason 0 it is the same in 3.1.1 and 5. */
function writePuback(out: Buffer, k: number, id: number): void {
  out[k * 4] = 0x40;
  out[k * 4 + 1] = 0x02;
  out[k * 4 + 2] = id >> 8;
  out[k * 4 + 3] = id & 0xff;
}
/** Packet ids of this connection's UNSUBSCRIBEs (SUBSCRIBE uses 1, sent on connects that do not unsubscribe). */
const UNSUBSCRIBE_ID = 1;
const STALE_UNSUBSCRIBE_ID = 2;

function settlement(): { done: Promise<void>; resolve: () => void } {
  let resolve!: () => void;
  const done = new Promise<void>((r) => (resolve = r));
  return { done, resolve };
}

/** readVarint's answer (one shared object: the hot path allocates nothing per frame). */
const varint = { value: 0, next: 0 };

/**
 * Reads an MQTT variable byte integer (at most 4 bytes) starting at `at`, not past `limit`:
 * into `out`, the value and the index after it. False if it did not end within 4 bytes or
 * before `limit`.
 */
function readVarint(buf: Buffer, at: number, limit: number, out: typeof varint): boolean {
  let value = 0;
  let mult = 1;
  for (let k = 0; k < 4 && at < limit; k++) {
    const b = buf[at++]!;
    value += (b & 0x7f) * mult;
    mult *= 128;
    if ((b & 0x80) === 0) {
      out.value = value;
      out.next = at;
      return true;
    }
  }
  out.value = value;
  out.next = at;
  return false;
}
