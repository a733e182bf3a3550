// Listeners on IPv6 addresses: the addresses the service logs are URLs a client can use. Before
// (found by an audit starting the service with HOST=::, INTERNAL_HOST=::1, MQTT_HOST=::1), the
// lines said `http://:::8000`, `http://::1:8001` and `mqtt://::1:1883`, which no client parses.
import net from 'node:net';
import { describe, expect, it } from 'vitest';
import { http, terminate, testEnv, useSpawnedServices } from '../helpers/service.js';

const spawned = useSpawnedServices();

/** Whether this machine has the IPv6 loopback address. */
const ipv6Loopback = await new Promise<boolean>((resolve) => {
  const s = net.createServer();
  s.once('error', () => resolve(false));
  s.listen(0, '::1', () => s.close(() => resolve(true)));
});

describe.runIf(ipv6Loopback)('IPv6 listeners', () => {
  it('log their addresses as URLs, the IPv6 address in brackets', async () => {
    const { svc, base, internal } = await spawned.ready(
      await testEnv({ HOST: '::', INTERNAL_HOST: '::1', MQTT_URL: undefined, MQTT_HOST: '::1', LOG_LEVEL: 'info' }),
    );
    expect(base).toMatch(/^http:\/\/\[::\]:\d+$/);
    expect(internal).toMatch(/^http:\/\/\[::1\]:\d+$/);
    const mqtt = (JSON.parse(await svc.waitFor(/embedded MQTT broker listening/)) as { address: string }).address;
    expect(mqtt).toMatch(/^mqtt:\/\/\[::1\]:\d+$/);
    // Each one a URL a client reaches the listener at (the wildcard through the loopback address).
    const port = (u: string) => new URL(u).port;
    expect((await http('GET', `http://[::1]:${port(base)}/health`)).status).toBe(200);
    expect((await http('GET', `${internal}/health`)).status).toBe(200);
    await new Promise<void>((resolve, reject) => {
      const s = net.connect(Number(port(mqtt)), new URL(mqtt).hostname.slice(1, -1), () => s.end(resolve));
      s.once('error', reject);
    });
    expect((await terminate(svc)).code).toBe(0);
  });

  it('a taken port on an IPv6 address is named as host and port in brackets', async () => {
    const blocker = net.createServer();
    await new Promise<void>((r) => blocker.listen(0, '::1', r));
    try {
      const { port } = blocker.address() as net.AddressInfo;
      const svc = spawned.spawn(await testEnv({ HOST: '::1', PORT: String(port) }));
      expect(await svc.exited).toBe(2);
      expect(svc.output.at(-1)).toContain(`cannot listen on [::1]:${port} (PORT/HOST)`);
    } finally {
      blocker.close();
    }
  });
});
