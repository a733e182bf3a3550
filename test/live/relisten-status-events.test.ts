// Status messages of an instance that reads the stored device status back after its live
// fan-out's LISTEN connection was away (docs/live.md §1, §4). A device first seen during the gap,
// by the other instance, whose template's `offline_after` (2 s) ran out before the gap ended, was
// offline before the gap and is offline after it: its stream clients get no `status` message
// for it. Before (found by an audit), the read back judged such a device by the default timeout
// (DEVICE_OFFLINE_AFTER_SECONDS, 600 s) before its template's was read, and told `status`
// `online` and, right after, `offline`: an `online` that was not true when told.
import crypto from 'node:crypto';
import { afterAll, describe, expect, it } from 'vitest';
import { listenBlockingProxy } from '../helpers/faults.js';
import { createDevices } from '../helpers/registry-api.js';
import { deviceClient, eventually } from '../helpers/registry-fixtures.js';
import { http, login, tenantToken, testEnv, useSpawnedServices } from '../helpers/service.js';
import { quietBroker } from './quiet-broker.js';
import { openWs } from './stream-client.js';

const spawned = useSpawnedServices();
const cleanups: (() => Promise<unknown>)[] = [];
afterAll(async () => {
  for (const c of cleanups.reverse()) await c().catch(() => undefined);
});

/** A broker no device publishes to, for the second instance; closed after the file. */
async function quietBrokerUrl(): Promise<string> {
  const broker = await quietBroker();
  cleanups.push(() => broker.close());
  return broker.url;
}

describe('status messages after the LISTEN connection was away', () => {
  it('a device seen and timed out by its template during the gap gets no status message', async () => {
    const env = await testEnv({
      INGEST_WORKERS: '1',
      MQTT_SUBSCRIBER_CONNECTIONS: '1',
      JWT_SECRET: crypto.randomBytes(24).toString('hex'),
      LOG_LEVEL: 'info',
      LOG_FORMAT: 'json',
    });
    const a = await spawned.ready(env);
    const tenant = `rs${crypto.randomBytes(3).toString('hex')}`;
    const token = await tenantToken(a.base, await login(a.base), tenant);
    const t = await http<{ template: { id: number } }>('POST', `${a.base}/template`, {
      token,
      body: { label: 'quick', offline_after: 2, attrs: [{ label: 'n', type: 'dynamic', value_type: 'integer' }] },
    });
    expect(t.status).toBe(200);
    const [{ id }] = await createDevices(a.base, token, { label: 'q', templates: [t.body.template.id] });

    // The second instance: its LISTEN connection goes through a proxy, its broker is its own.
    const proxy = await listenBlockingProxy(env.DATABASE_URL!, 'device-registry-live-listen');
    cleanups.push(() => proxy.close());
    const b = await spawned.ready({
      ...env,
      DATABASE_URL: proxy.url,
      MQTT_URL: await quietBrokerUrl(),
      DATA_DIR: (await testEnv()).DATA_DIR,
    });
    const ws = await openWs(`${b.base.replace('http', 'ws')}/stream?device=${id}`, { token });
    cleanups.push(() => Promise.resolve(ws.close()));
    await ws.next((m) => m.type === 'subscribed', 'subscribed');

    proxy.block();
    const device = await deviceClient(env.MQTT_URL!, { username: `${tenant}:${id}` });
    await device.publishAsync(`${tenant}:${id}/attrs`, JSON.stringify({ n: 1 }), { qos: 1 });
    await device.endAsync();
    // Stored by the first instance; then its template's 2 s run out, and the gap ends.
    const seen = await eventually(async () => {
      const v = await http<{ last_seen: string | null; status: string }>('GET', `${a.base}/device/${id}?withStatus`, { token });
      return v.body.last_seen ?? undefined;
    }, 'the device seen by the first instance');
    await new Promise((r) => setTimeout(r, 4000));
    proxy.unblock();

    // The second instance reads the stored time back (its view shows it) ...
    await eventually(async () => {
      const v = await http<{ last_seen: string | null; status: string }>('GET', `${b.base}/device/${id}?withStatus`, { token });
      return v.body.last_seen === seen && v.body.status === 'offline' ? true : undefined;
    }, 'the stored last_seen on the second instance');
    await new Promise((r) => setTimeout(r, 3000));
    // ... and tells no status change: offline before, offline after.
    expect(ws.messages.filter((m) => m.type === 'status')).toEqual([]);
  }, 90_000);
});
