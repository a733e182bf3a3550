// The embedded MQTT broker (aedes), used when MQTT_URL is not set. It runs in the ingest router
// thread; EmbeddedLink installs the device authorisation (device-auth.ts) and feeds accepted
// attrs messages to the router, whose ack releases the broker's PUBACK.
import net from 'node:net';
import { Aedes, type AedesOptions, type Client } from 'aedes';
import type pg from 'pg';
import { ConfigError } from '../config.js';
import type { Logger } from '../log.js';
import { DeviceAuthorisation, type IngestSink } from './device-auth.js';
import { DeviceDirectory } from './device-directory.js';
import type { BrokerLink } from './link.js';
import type { RegistryEvent } from '../registry/events.js';
import type { IngestRouter } from '../ingest/router.js';
import type { Acker } from './subscriber.js';

/** Acks of the embedded broker: the token names the PUBACK callback aedes is waiting on. */
class CallbackAcker implements Acker {
  private readonly callbacks = new Map<number, () => void>();
  private next = 0;

  register(done: () => void): number {
    const token = this.next;
    this.next = (this.next + 1) % 0x7fffffff;
    this.callbacks.set(token, done);
    return token;
  }

  ack(token: number): void {
    const done = this.callbacks.get(token);
    if (!done) return;
    this.callbacks.delete(token);
    done();
  }
}

export interface EmbeddedBroker {
  aedes: Aedes;
  port: number;
  /** Stops accepting connections; connected clients stay. */
  stopAccepting(): void;
  close(): Promise<void>;
}

export async function startEmbeddedBroker(opts: {
  host: string;
  port: number;
  log: Logger;
  hooks?: Partial<AedesOptions>;
}): Promise<EmbeddedBroker> {
  const aedes = await Aedes.createBroker(opts.hooks ?? {});
  const server = net.createServer(aedes.handle);
  await new Promise<void>((resolve, reject) => {
    server.once('error', (err: NodeJS.ErrnoException) => {
      aedes.close();
      if (err.code === 'EADDRINUSE') {
        reject(new ConfigError('MQTT_PORT', `${opts.port} is already in use on ${opts.host}: free it, choose another MQTT_PORT, or set MQTT_URL to use a running broker`));
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

/** The embedded broker with device authorisation, as the router's broker link. */
export class EmbeddedLink implements BrokerLink {
  private constructor(
    private readonly broker: EmbeddedBroker,
    private readonly auth: DeviceAuthorisation,
    private readonly directory: DeviceDirectory,
  ) {}

  get mqttPort(): number {
    return this.broker.port;
  }

  static async start(opts: { host: string; port: number; pool: pg.Pool; log: Logger; router: IngestRouter }): Promise<EmbeddedLink> {
    const directory = new DeviceDirectory(opts.pool);
    const acker = new CallbackAcker();
    const sink: IngestSink = (tenant, id, payload, done) => opts.router.accept(tenant, id, payload, acker, done ? acker.register(done) : -1);
    const auth = new DeviceAuthorisation(directory, sink, opts.log);
    const broker = await startEmbeddedBroker({ host: opts.host, port: opts.port, log: opts.log, hooks: auth.hooks() });
    const forget = (client: Client) => auth.disconnected(client);
    broker.aedes.on('clientDisconnect', forget);
    broker.aedes.on('clientError', forget);
    return new EmbeddedLink(broker, auth, directory);
  }

  /** aedes reads a client's next packets only after its pending ones were acknowledged: no pause needed. */
  pause(): void {}

  resume(): void {}

  onRegistryEvent(event: RegistryEvent): void {
    this.directory.invalidate(event);
    if (event.type === 'devices.removed') for (const id of event.deviceIds) this.auth.closeDevice(event.tenant, id);
  }

  stopAccepting(): void {
    this.broker.stopAccepting();
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

  close(): Promise<void> {
    return this.broker.close();
  }
}
