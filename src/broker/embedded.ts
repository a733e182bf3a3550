// The embedded MQTT broker (aedes) used when MQTT_URL is not set. Device authorisation hooks
// are installed by the broker link (src/broker/link.ts) through `hooks`.
import net from 'node:net';
import { Aedes, type AedesOptions } from 'aedes';
import { ConfigError } from '../config.js';
import type { Logger } from '../log.js';

export interface EmbeddedBroker {
  aedes: Aedes;
  port: number;
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
    close: () =>
      new Promise<void>((resolve) => {
        // Close client connections too, or server.close() waits for them forever.
        aedes.close(() => server.close(() => resolve()));
      }),
  };
}
