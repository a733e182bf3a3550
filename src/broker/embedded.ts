// The embedded MQTT broker (aedes), used when MQTT_URL is not set. It runs in the ingest router
// thread; EmbeddedLink installs the device authorisation (device-auth.ts) and hands accepted
// attrs messages to the inbox, whose use of a message's ack handle releases its PUBACK.
import net from 'node:net';
import { Aedes, type AedesOptions, type Client } from 'aedes';
import type pg from 'pg';
import { ConfigError } from '../config.js';
import type { Logger } from '../log.js';
import { DeviceAuthorisation } from './device-auth.js';
import { DeviceDirectory } from './device-directory.js';
import { NO_ACK, type BrokerLink, type Inbox, type LinkState } from './link.js';
import type { RegistryEvent } from '../registry/events.js';

const PACKET_OVERHEAD_BYTES = 128 * 1024;

export interface EmbeddedBroker {
  aedes: Aedes;
  port: number;
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

export async function startEmbeddedBroker(opts: {
  host: string;
  port: number;
  log: Logger;
  hooks?: Partial<AedesOptions>;
  /** Packets announcing more bytes close their connection (`onTooLarge` is told). */
  maxPacketBytes?: number;
  onTooLarge?: () => void;
}): Promise<EmbeddedBroker> {
  const aedes = await Aedes.createBroker(opts.hooks ?? {});
  const { maxPacketBytes, onTooLarge = () => undefined } = opts;
  const server = net.createServer((socket) => {
    const client = aedes.handle(socket);
    if (maxPacketBytes !== undefined) capPacketSize(client, maxPacketBytes, onTooLarge);
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', (err: NodeJS.ErrnoException) => {
      aedes.close();
      if (err.code === 'EADDRINUSE') {
        reject(
          new ConfigError(
            'MQTT_PORT',
            `${opts.port} is already in use on ${opts.host}: free it, choose another MQTT_PORT, or set MQTT_URL to use a running broker`,
          ),
        );
      } else {
        reject(err);
      }
    });
    server.listen(opts.port, opts.host, () => resolve());
  });
  const port = (server.address() as net.AddressInfo).port;
  opts.log.info('embedded MQTT broker listening', { address: `mqtt://${opts.host}:${port}` });
  return {
    aedes,
    port,
    stopAccepting: () => server.close(),
    close: () =>
      new Promise<void>((resolve) => {
        // Close client connections too, or server.close() waits for them forever.
        aedes.close(() => server.close(() => resolve()));
      }),
  };
}

/** The embedded broker with device authorisation, as a broker link. */
export class EmbeddedLink implements BrokerLink {
  private closed = false;

  private constructor(
    private readonly broker: EmbeddedBroker,
    private readonly auth: DeviceAuthorisation,
    private readonly directory: DeviceDirectory,
  ) {}

  get mqttPort(): number {
    return this.broker.port;
  }

  static async start(opts: {
    host: string;
    port: number;
    pool: pg.Pool;
    log: Logger;
    inbox: Inbox;
    maxMessageBytes: number;
    /** The longest a device lookup is used (REGISTRY_CACHE_MAX_AGE_SECONDS). */
    cacheMaxAgeMs: number;
  }): Promise<EmbeddedLink> {
    const directory = new DeviceDirectory(opts.pool, opts.cacheMaxAgeMs);
    const auth = new DeviceAuthorisation(directory, opts.inbox, opts.log);
    const broker = await startEmbeddedBroker({
      host: opts.host,
      port: opts.port,
      log: opts.log,
      hooks: auth.hooks(),
      // Room for the largest topic (65,535 bytes) and MQTT 5 properties beside the payload; a
      // packet up to this size whose payload is too large is the inbox's to refuse.
      maxPacketBytes: opts.maxMessageBytes + PACKET_OVERHEAD_BYTES,
      // The connection is closed unread: nothing to acknowledge.
      onTooLarge: () => opts.inbox.refuse('packet_too_large', NO_ACK),
    });
    const forget = (client: Client) => auth.disconnected(client);
    broker.aedes.on('clientDisconnect', forget);
    broker.aedes.on('clientError', forget);
    return new EmbeddedLink(broker, auth, directory);
  }

  /** aedes reads a client's next packets only after its pending ones were acknowledged: no pause needed. */
  pause(): void {}

  resume(): void {}

  registryChanged(event: RegistryEvent): void {
    this.directory.invalidate(event);
    if (event.type === 'devices.removed') for (const id of event.deviceIds) this.auth.closeDevice(event.tenant, id);
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
