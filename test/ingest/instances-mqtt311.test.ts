// Several instances against a broker that refuses MQTT 5 (aedes): MQTT 3.1.1 has no shared
// subscription, so each instance's one subscriber connection takes every device message in and
// each instance stores it (checked by an audit: two instances, each of 3 messages stored twice).
// A design limit, documented (docs/operations.md §7); before (found by the same audit), a second
// instance said only what the first did (a warning, "one MQTT 3.1.1 subscriber connection without
// a shared subscription"), and nothing told the operator that messages were being stored twice.
// Now an instance that finds another holding the deployment's first slot says so, at error.
import crypto from 'node:crypto';
import net from 'node:net';
import { Aedes } from 'aedes';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../../src/net.js';
import { tempDir, testEnv, useSpawnedServices } from '../helpers/service.js';

describe('two instances against a broker without MQTT 5 (aedes)', () => {
  let broker: Aedes;
  let server: net.Server;
  let url: string;
  const services = useSpawnedServices();

  beforeAll(async () => {
    broker = await Aedes.createBroker();
    server = net.createServer(broker.handle);
    const port = await freePort();
    await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
    url = `mqtt://127.0.0.1:${port}`;
  });

  afterAll(async () => {
    await new Promise<void>((resolve) => broker.close(() => server.close(() => resolve())));
  });

  it('the second one logs, at error, that every message is stored once per instance', async () => {
    const env = await testEnv({ MQTT_URL: url, LOG_LEVEL: 'info', LOG_FORMAT: 'json', JWT_SECRET: crypto.randomBytes(32).toString('hex') });
    const first = await services.ready(env);
    const second = await services.ready({ ...env, DATA_DIR: await tempDir() });
    const line = await second.svc.waitFor(/another instance/, 5000);
    const entry = JSON.parse(line) as Record<string, unknown>;
    expect(entry.level).toBe('error');
    expect(entry.msg).toMatch(/stored once per instance/);
    expect(first.svc.output.some((l) => /another instance/.test(l))).toBe(false);
  }, 120_000);
});
