// One ingest subscriber connection to an external broker, written on mqtt-packet (the codec
// mqtt.js and aedes use). Why not mqtt.js itself: mqtt.js handles one incoming packet at a
// time and, with `customHandleAcks`, only reads the next packet after the previous one was
// acknowledged, so acknowledging after the database commit would serialise a connection to
// one message per commit. Here acknowledgements are decoupled from reading: every PUBLISH is
// handed over at once with an `ack` function, and PUBACK goes out when the caller calls it.
//
// Session: fixed client id, clean start off, a session expiry (MQTT 5) or a persistent session
// (3.1.1), so the broker keeps the subscription and queues messages while the service is away
// and redelivers unacknowledged ones after a reconnect. An ack from before a reconnect is
// never sent on the new connection: packet ids are reused, and the broker redelivers that
// message anyway (at least once).
import net from 'node:net';
import tls from 'node:tls';
import { EventEmitter } from 'node:events';
import mqttPacket from 'mqtt-packet';
import type { Packet } from 'mqtt-packet';
import type { Logger } from '../log.js';

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
  log: Logger;
  /** Called for every PUBLISH; `ack` sends the PUBACK (a no-op for QoS 0). */
  onMessage(topic: string, payload: Buffer, ack: () => void): void;
}

/** The broker refused the protocol version (CONNACK 1 / reason 0x84) or hung up on CONNECT. */
export class ProtocolRefused extends Error {
  constructor(version: MqttVersion) {
    super(`the broker does not accept MQTT ${version === 5 ? '5' : '3.1.1'}`);
    this.name = 'ProtocolRefused';
  }
}

export class ConnectRefused extends Error {
  constructor(readonly code: number) {
    super(`the broker refused the connection (code ${code})`);
    this.name = 'ConnectRefused';
  }
}

const NO_ACK = () => undefined;

export class SubscriberConnection extends EventEmitter {
  private socket: net.Socket | undefined;
  /** Increases with every network connection; acks carry the generation they belong to. */
  private generation = 0;
  private connected = false;
  private closing = false;
  private paused = false;
  private reconnectDelay = 250;
  private reconnectTimer: NodeJS.Timeout | undefined;
  private pingTimer: NodeJS.Timeout | undefined;
  private lastReceived = 0;
  private uncorkScheduled = false;
  private firstConnect: { resolve: () => void; reject: (err: Error) => void } | undefined;
  private readonly keepalive: number;
  private readonly url: URL;

  constructor(private readonly opts: SubscriberOptions) {
    super();
    this.keepalive = opts.keepaliveSeconds ?? 30;
    this.url = new URL(opts.url);
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

  /** Stops reading from the broker (backpressure); acks still go out. */
  pause(): void {
    this.paused = true;
    this.socket?.pause();
  }

  resume(): void {
    this.paused = false;
    this.socket?.resume();
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
      if (this.connected) {
        socket.uncork();
        // Reason 0 keeps the session (MQTT 5 would drop it only with a session expiry of 0).
        socket.end(mqttPacket.generate({ cmd: 'disconnect' }, { protocolVersion: this.opts.version }));
      } else {
        socket.destroy();
      }
      setTimeout(() => socket.destroy(), 2000).unref();
    });
  }

  private connect(): void {
    const gen = ++this.generation;
    const port = Number(this.url.port || (this.isTls() ? 8883 : 1883));
    const host = this.url.hostname;
    const socket = this.isTls() ? tls.connect({ host, port, servername: host }) : net.connect({ host, port });
    socket.setNoDelay(true);
    this.socket = socket;
    const parser = mqttPacket.parser({ protocolVersion: this.opts.version });
    let connackSeen = false;
    let tcpConnected = false;

    parser.on('packet', (packet: Packet) => {
      this.lastReceived = Date.now();
      switch (packet.cmd) {
        case 'publish': {
          const qos = packet.qos;
          const messageId = packet.messageId;
          const payload = typeof packet.payload === 'string' ? Buffer.from(packet.payload) : packet.payload;
          const ack = qos === 0 || messageId === undefined ? NO_ACK : () => this.sendAck(gen, qos, messageId);
          this.opts.onMessage(packet.topic, payload, ack);
          break;
        }
        case 'connack': {
          connackSeen = true;
          const code = (this.opts.version === 5 ? packet.reasonCode : packet.returnCode) ?? 0;
          if (code !== 0) {
            const err = code === 1 || code === 0x84 ? new ProtocolRefused(this.opts.version) : new ConnectRefused(code);
            this.failConnect(err);
            socket.destroy();
            return;
          }
          this.write(
            mqttPacket.generate(
              {
                cmd: 'subscribe',
                messageId: 1,
                subscriptions: this.opts.filters.map((topic) => ({ topic, qos: 1 as const })),
              },
              { protocolVersion: this.opts.version },
            ),
          );
          break;
        }
        case 'suback': {
          const refused = (packet.granted as Array<number | { qos: number }>).filter((g) => (typeof g === 'number' ? g : g.qos) >= 0x80);
          if (refused.length > 0) {
            this.failConnect(new Error(`the broker refused the subscription to ${this.opts.filters.join(', ')}`));
            socket.destroy();
            return;
          }
          this.connected = true;
          this.reconnectDelay = 250;
          this.emit('connected');
          if (this.firstConnect) {
            this.firstConnect.resolve();
            this.firstConnect = undefined;
          }
          break;
        }
        case 'pubrel':
          // QoS 2 is not subscribed; answer to keep a misbehaving broker happy.
          this.write(mqttPacket.generate({ cmd: 'pubcomp', messageId: packet.messageId }, { protocolVersion: this.opts.version }));
          break;
        case 'disconnect':
          socket.destroy();
          break;
        default:
          break;
      }
    });
    parser.on('error', (err: Error) => {
      this.opts.log.warn('malformed packet from the broker; reconnecting', { client: this.opts.clientId, error: err.message });
      socket.destroy();
    });

    socket.on(this.isTls() ? 'secureConnect' : 'connect', () => {
      tcpConnected = true;
      const properties = this.opts.version === 5
        ? { sessionExpiryInterval: this.opts.sessionExpirySeconds, receiveMaximum: this.opts.receiveMaximum }
        : undefined;
      const username = this.url.username ? decodeURIComponent(this.url.username) : undefined;
      const password = this.url.password ? Buffer.from(decodeURIComponent(this.url.password)) : undefined;
      this.write(
        mqttPacket.generate(
          {
            cmd: 'connect',
            protocolId: 'MQTT',
            protocolVersion: this.opts.version,
            clientId: this.opts.clientId,
            clean: false,
            keepalive: this.keepalive,
            ...(username !== undefined ? { username } : {}),
            ...(password !== undefined ? { password } : {}),
            ...(properties ? { properties } : {}),
          },
          { protocolVersion: this.opts.version },
        ),
      );
      this.lastReceived = Date.now();
      clearInterval(this.pingTimer);
      this.pingTimer = setInterval(() => this.keepAlive(socket), (this.keepalive * 1000) / 2);
      this.pingTimer.unref();
      if (this.paused) socket.pause();
    });
    socket.on('data', (chunk: Buffer) => parser.parse(chunk));
    let socketError: Error | undefined;
    socket.on('error', (err) => (socketError = err));
    socket.on('close', () => {
      clearInterval(this.pingTimer);
      const wasConnected = this.connected;
      this.connected = false;
      if (this.socket === socket) this.socket = undefined;
      if (wasConnected && !this.closing) this.emit('disconnected');
      if (this.firstConnect) {
        // Connected but no CONNACK at all: a broker that cannot parse this protocol version hangs up.
        this.failConnect(
          !tcpConnected
            ? new Error(`cannot reach the broker at ${this.url.host}: ${socketError?.message ?? 'connection closed'}`)
            : connackSeen
              ? new Error('the connection closed before the subscription was confirmed')
              : new ProtocolRefused(this.opts.version),
        );
        return;
      }
      if (!this.closing) this.scheduleReconnect();
    });
  }

  private failConnect(err: Error): void {
    if (this.firstConnect) {
      const { reject } = this.firstConnect;
      this.firstConnect = undefined;
      this.closing = true;
      reject(err);
    } else {
      this.opts.log.warn('broker refused the ingest subscriber', { client: this.opts.clientId, error: err.message });
    }
  }

  private scheduleReconnect(): void {
    clearTimeout(this.reconnectTimer);
    this.reconnectTimer = setTimeout(() => this.connect(), this.reconnectDelay);
    this.reconnectDelay = Math.min(this.reconnectDelay * 2, 5000);
  }

  private keepAlive(socket: net.Socket): void {
    if (Date.now() - this.lastReceived > this.keepalive * 1500) {
      this.opts.log.warn('broker stopped answering; reconnecting', { client: this.opts.clientId });
      socket.destroy();
      return;
    }
    if (this.connected) this.write(PINGREQ);
  }

  private sendAck(gen: number, qos: number, messageId: number): void {
    if (gen !== this.generation || !this.connected || !this.socket) return;
    this.write(qos === 2 ? pubrec(messageId) : puback(messageId));
  }

  /** Writes are corked and flushed once per tick: many acks, one syscall. */
  private write(buf: Buffer): void {
    const socket = this.socket;
    if (!socket || socket.destroyed) return;
    if (!this.uncorkScheduled) {
      this.uncorkScheduled = true;
      socket.cork();
      process.nextTick(() => {
        this.uncorkScheduled = false;
        socket.uncork();
      });
    }
    socket.write(buf);
  }

  private isTls(): boolean {
    return this.url.protocol === 'mqtts:' || this.url.protocol === 'ssl:';
  }
}

const PINGREQ = Buffer.from([0xc0, 0x00]);

// PUBACK/PUBREC with reason code 0 and no properties have the same 4 bytes in 3.1.1 and 5.
function puback(id: number): Buffer {
  return Buffer.from([0x40, 0x02, id >> 8, id & 0xff]);
}
function pubrec(id: number): Buffer {
  return Buffer.from([0x50, 0x02, id >> 8, id & 0xff]);
}
