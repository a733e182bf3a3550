// The connect-storm baseline: a bare aedes broker (no authentication hooks, no database) on a
// free port, as a process of its own. Prints `listening <port>`.
import net from 'node:net';
import { Aedes } from 'aedes';

const aedes = await Aedes.createBroker();
const server = net.createServer(aedes.handle);
server.listen({ port: 0, host: '127.0.0.1', backlog: 4096 }, () => {
  console.log(`listening ${(server.address() as net.AddressInfo).port}`);
});
process.on('SIGTERM', () => aedes.close(() => server.close(() => process.exit(0))));
