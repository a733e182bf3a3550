// An embedded aedes broker no device publishes to: a second instance on it hears telemetry only
// through the live fan-out, never from devices (the relisten tests).
import net from 'node:net';
import { Aedes } from 'aedes';

export interface QuietBroker {
  url: string;
  close(): Promise<void>;
}

export async function quietBroker(): Promise<QuietBroker> {
  const quiet = await Aedes.createBroker();
  const server = net.createServer(quiet.handle);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `mqtt://127.0.0.1:${(server.address() as net.AddressInfo).port}`,
    close: () => new Promise<void>((resolve) => quiet.close(() => server.close(() => resolve()))),
  };
}
