// The embedded MQTT broker (aedes), used when MQTT_URL is not set. It runs in the ingest router
// thread; EmbeddedLink installs the device authorisation (device-auth.ts) and hands accepted
// attrs messages to the inbox, whose use of a message's ack handle releases its PUBACK.
// Listeners: plain MQTT (MQTT_PORT, unless MQTT_PLAIN=false) and MQTT over TLS (MQTT_TLS_PORT,
// with MQTT_TLS_CERT/MQTT_TLS_KEY; MQTT_TLS_CA asks for client certificates, which a device may
// log in with instead of a password: see device-auth.ts).
import crypto from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import tls from 'node:tls';
import { Aedes, type AedesOptions, type Client, type PublishPacket } from 'aedes';
import { ConfigError, type DeviceAuthMode } from '../config.js';
import type { Logger } from '../log.js';
import { hostPort } from '../net.js';
import type { LoginCheck } from '../registry/credentials/logins.js';
import { DeviceAuthorisation } from './device-auth.js';
import { NO_ACK, maxPacketBytes, type BrokerLink, type Inbox, type LinkState } from './link.js';
import type { RegistryEvent } from '../registry/events.js';

/** The TLS listener: PEM file paths (MQTT_TLS_CERT, MQTT_TLS_KEY, MQTT_TLS_CA) and its port. */
export interface TlsListener {
  port: number;
  cert: string;
  key: string;
  ca: string | undefined;
}

export interface EmbeddedBroker {
  aedes: Aedes;
  /** The plain listener's port; undefined with MQTT_PLAIN=false. */
  port: number | undefined;
  tlsPort: number | undefined;
  /** Stops accepting connections; connected clients stay. */
  stopAccepting(): void;
  close(): Promise<void>;
}

/** What mqtt-packet's parser (one per aedes client) exposes of its state; not part of aedes's typed API. */
interface PacketParser {
  packet: { length: number };
  // A field, not a method: capPacketSize replaces it and calls the original with the parser as `this`.
  _parseLength: (this: PacketParser) => boolean;
  _emitError(err: Error): void;
}

/**
 * Makes a client's parser give up on a packet whose announced length is over `limit`, before it
 * buffers the payload: aedes reads a whole packet into memory first, so a few clients announcing
 * 250 MiB each could take gigabytes. The parser's error makes aedes close the connection.
 */
function capPacketSize(client: Client, limit: number, tooLarge: () => void): void {
  // `_parser` is aedes's private field (not in its typed API).
  const parser = (client as unknown as { _parser?: PacketParser })._parser;
  if (!parser || typeof parser._parseLength !== 'function') return;
  const parseLength = parser._parseLength;
  parser._parseLength = function (this: PacketParser) {
    const ok = parseLength.call(this);
    if (ok && this.packet.length > limit) {
      tooLarge();
      this._emitError(new Error(`MQTT packet of ${this.packet.length} bytes is over the limit of ${limit}`));
      return false;
    }
    return ok;
  };
}

/**
 * aedes delivers a QoS 2 message when it arrives and keeps it until its PUBREL only to know a
 * resend by its packet id (MQTT-4.3.3-2); kept with its payload, a client withholding PUBRELs
 * held up to 64 KiB per packet id in memory, and a persistent session keeps them after the
 * connection ends. They are kept without it.
 */
function keepQos2WithoutPayload(aedes: Aedes): void {
  // aedes's `persistence` is not in its typed API.
  const { persistence } = aedes as unknown as {
    persistence: { incomingStorePacket(client: Client, packet: PublishPacket): Promise<void> };
  };
  const store = persistence.incomingStorePacket.bind(persistence);
  persistence.incomingStorePacket = (client, packet) => store(client, { ...packet, payload: EMPTY });
}
const EMPTY = Buffer.alloc(0);
/** How long a new connection may take to send CONNECT (aedes's default), and on TLS its handshake. */
const CONNECT_WAIT_MS = 30_000;

/** Reads a PEM file of the TLS settings; a bad one stops the start naming its variable. */
function pem(file: string, variable: string): Buffer {
  try {
    return fs.readFileSync(file);
  } catch (err) {
    throw new ConfigError(variable, `cannot be read: ${(err as Error).message}`);
  }
}

const PEM_CERTIFICATE = /-----BEGIN (TRUSTED )?CERTIFICATE-----[\s\S]*?-----END \1?CERTIFICATE-----/g;

/**
 * The certificates of MQTT_TLS_CA. Node takes a `ca` holding none (an empty file, a private key,
 * any text) or a damaged one without a word, and then no client certificate ever verifies: such
 * a file stops the start instead.
 */
function caCertificates(file: Buffer): Buffer {
  const blocks = [...file.toString('latin1').matchAll(PEM_CERTIFICATE)];
  if (blocks.length === 0)
    throw new ConfigError('MQTT_TLS_CA', 'must hold PEM certificates (-----BEGIN CERTIFICATE-----); the file has none');
  for (const [block, trusted] of blocks) {
    if (trusted) continue; // OpenSSL's form with trust settings, which X509Certificate does not read
    try {
      new crypto.X509Certificate(block);
    } catch (err) {
      throw new ConfigError('MQTT_TLS_CA', `must hold PEM certificates; one of them cannot be read: ${(err as Error).message}`);
    }
  }
  return file;
}

function tlsOptions(t: TlsListener): tls.TlsOptions {
  const ca = t.ca === undefined ? undefined : caCertificates(pem(t.ca, 'MQTT_TLS_CA'));
  const options: tls.TlsOptions = {
    cert: pem(t.cert, 'MQTT_TLS_CERT'),
    key: pem(t.key, 'MQTT_TLS_KEY'),
    // A client certificate is asked for, never required: devices without one log in with a password.
    ...(ca ? { ca, requestCert: true, rejectUnauthorized: false } : {}),
  };
  try {
    tls.createSecureContext(options);
  } catch (err) {
    throw new ConfigError(
      'MQTT_TLS_CERT',
      `and MQTT_TLS_KEY${ca ? ' and MQTT_TLS_CA' : ''} must be PEM certificate, matching private key${ca ? ' and CA' : ''}: ${(err as Error).message}`,
    );
  }
  return options;
}

/** Listens; a taken port stops the start naming its variable, any other failure naming it and MQTT_HOST. */
function listen(server: net.Server, host: string, port: number, variable: string): Promise<number> {
  return new Promise<number>((resolve, reject) => {
    server.once('error', (err: NodeJS.ErrnoException) => {
      if (err.code === 'EADDRINUSE') {
        reject(
          new ConfigError(
            variable,
            `${port} is already in use on ${host}: free it, choose another ${variable}, or set MQTT_URL to use a running broker`,
          ),
        );
      } else {
        // Named like the HTTP listeners' failures (src/http/server.ts), not the bare system error.
        const cause =
          err.code === 'EADDRNOTAVAIL'
            ? 'no network interface of this machine has that address'
            : err.code === 'ENOTFOUND' || err.code === 'EAI_AGAIN'
              ? 'the host name does not resolve'
              : err.code === 'EACCES'
                ? 'permission denied (a port below 1024 needs privileges)'
                : err.message;
        reject(new Error(`cannot listen on ${hostPort(host, port)} (${variable}/MQTT_HOST); ${cause}`));
      }
    });
    // A deep accept queue (the kernel caps it at net.core.somaxconn): a reconnect storm of
    // thousands of devices is queued, not dropped into SYN retries seconds apart.
    server.listen({ port, host, backlog: 4096 }, () => resolve((server.address() as net.AddressInfo).port));
  });
}

export async function startEmbeddedBroker(opts: {
  host: string;
  port: number;
  /** false: no plain listener (MQTT_PLAIN=false). */
  plain?: boolean;
  tls?: TlsListener;
  log: Logger;
  hooks?: Partial<AedesOptions>;
  /** Packets announcing more bytes close their connection (`onTooLarge` is told). */
  maxPacketBytes?: number;
  onTooLarge?: () => void;
}): Promise<EmbeddedBroker> {
  const secure = opts.tls ? tlsOptions(opts.tls) : undefined;
  const aedes = await Aedes.createBroker({ ...opts.hooks, connectTimeout: CONNECT_WAIT_MS });
  keepQos2WithoutPayload(aedes);
  const { maxPacketBytes, onTooLarge = () => undefined } = opts;
  const handle = (socket: net.Socket) => {
    const client = aedes.handle(socket);
    if (maxPacketBytes !== undefined) capPacketSize(client, maxPacketBytes, onTooLarge);
  };
  const servers: net.Server[] = [];
  let port: number | undefined;
  let tlsPort: number | undefined;
  try {
    if (opts.plain !== false) {
      const server = net.createServer(handle);
      servers.push(server);
      port = await listen(server, opts.host, opts.port, 'MQTT_PORT');
      opts.log.info('embedded MQTT broker listening', { address: `mqtt://${hostPort(opts.host, port)}` });
    }
    if (opts.tls && secure) {
      // 'secureConnection': the handshake is done, so a client certificate is known at CONNECT.
      // A handshake gets the time aedes gives a CONNECT (Node's default is 120 s): a client that
      // opens the port and goes quiet holds a socket no longer than on the plain listener (before,
      // found by an audit and a review, it held it for good: see tlsClientError below).
      const server = tls.createServer({ ...secure, handshakeTimeout: CONNECT_WAIT_MS }, handle);
      // Node emits a handshake timeout here without closing the socket (v20): the listener must.
      server.on('tlsClientError', (err, socket) => {
        opts.log.debug('MQTT TLS handshake failed', { error: err.message });
        socket.destroy();
      });
      servers.push(server);
      tlsPort = await listen(server, opts.host, opts.tls.port, 'MQTT_TLS_PORT');
      opts.log.info('embedded MQTT broker listening', {
        address: `mqtts://${hostPort(opts.host, tlsPort)}`,
        clientCertificates: opts.tls.ca !== undefined,
      });
    }
  } catch (err) {
    for (const s of servers) s.close();
    aedes.close();
    throw err;
  }
  const closeServers = () => Promise.all(servers.map((s) => new Promise<void>((resolve) => s.close(() => resolve()))));
  return {
    aedes,
    port,
    tlsPort,
    stopAccepting: () => {
      for (const s of servers) s.close();
    },
    close: () =>
      flushClients(aedes).then(
        () =>
          new Promise<void>((resolve) => {
            // Close client connections too, or server.close() waits for them forever.
            aedes.close(() => void closeServers().then(() => resolve()));
          }),
      ),
  };
}

/** How long a shutdown waits for the PUBACKs already written to reach the devices' sockets. */
const FLUSH_BOUND_MS = 500;

/**
 * Lets what aedes wrote to its clients (the PUBACKs of committed messages, used just before a
 * shutdown) leave before the connections are destroyed. mqtt-packet corks a connection for each
 * packet and uncorks it on the next tick, and aedes' close destroys each socket: closed within
 * the same run of promise continuations as the last acks (the router's drain), the PUBACKs were
 * thrown away and the devices sent those messages again, stored twice (found by an audit).
 */
async function flushClients(aedes: Aedes): Promise<void> {
  await new Promise<void>((resolve) => setImmediate(resolve));
  // aedes's `clients` is not in its typed API, and it types `conn` as its own Connection: at runtime a socket.
  const waiting = Object.values((aedes as unknown as { clients: Record<string, Client> }).clients)
    .map((c) => c.conn as unknown as net.Socket)
    .filter((conn) => !conn.destroyed && conn.writableLength > 0)
    .map(
      (conn) =>
        new Promise<void>((resolve) => {
          conn.once('drain', () => resolve());
          conn.once('close', () => resolve());
        }),
    );
  if (waiting.length === 0) return;
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([Promise.all(waiting), new Promise<void>((resolve) => (timer = setTimeout(resolve, FLUSH_BOUND_MS)))]);
  clearTimeout(timer);
}

/** The embedded broker with device authorisation, as a broker link. */
export class EmbeddedLink implements BrokerLink {
  private closed = false;

  private constructor(
    private readonly broker: EmbeddedBroker,
    private readonly auth: DeviceAuthorisation,
  ) {}

  get mqttPort(): number | undefined {
    return this.broker.port;
  }

  get mqttTlsPort(): number | undefined {
    return this.broker.tlsPort;
  }

  static async start(opts: {
    host: string;
    port: number;
    plain: boolean;
    tls: TlsListener | undefined;
    /** The registry's answer to each login (asked of the main thread). */
    logins: LoginCheck;
    deviceAuth: DeviceAuthMode;
    log: Logger;
    inbox: Inbox;
    maxMessageBytes: number;
  }): Promise<EmbeddedLink> {
    const auth = new DeviceAuthorisation(opts.logins, opts.deviceAuth, opts.inbox, opts.log);
    const broker = await startEmbeddedBroker({
      host: opts.host,
      port: opts.port,
      plain: opts.plain,
      tls: opts.tls,
      log: opts.log,
      hooks: auth.hooks(),
      maxPacketBytes: maxPacketBytes(opts.maxMessageBytes),
      // The connection is closed unread: nothing to acknowledge.
      onTooLarge: () => opts.inbox.refuse('packet_too_large', NO_ACK),
    });
    const forget = (client: Client) => auth.disconnected(client);
    broker.aedes.on('clientDisconnect', forget);
    broker.aedes.on('clientError', forget);
    return new EmbeddedLink(broker, auth);
  }

  /** aedes reads a client's next packets only after its pending ones were acknowledged: no pause needed. */
  pause(): void {}

  resume(): void {}

  registryChanged(event: RegistryEvent): void {
    this.auth.registryChanged(event);
  }

  stopAccepting(): void {
    this.broker.stopAccepting();
    this.auth.hold();
  }

  publish(topics: string[], payload: string): Promise<void> {
    const buf = Buffer.from(payload, 'utf8');
    return Promise.all(
      topics.map(
        (topic) =>
          new Promise<void>((resolve, reject) => {
            this.broker.aedes.publish({ cmd: 'publish', topic, payload: buf, qos: 1, retain: false, dup: false }, (err?: Error) =>
              err ? reject(err) : resolve(),
            );
          }),
      ),
    ).then(() => undefined);
  }

  /** The embedded broker is part of this process: up while it runs. */
  state(): LinkState {
    return { up: !this.closed, connected: this.closed ? 0 : 1, connections: 1 };
  }

  close(): Promise<void> {
    this.closed = true;
    return this.broker.close();
  }
}
