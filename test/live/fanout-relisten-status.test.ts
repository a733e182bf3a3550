// Device status across instances when the live fan-out's LISTEN connection is lost (docs/live.md
// §1 and §4). Two instances on one database and one broker; the second reaches the database
// through a proxy that keeps its live LISTEN connection away for a while. Messages the first
// instance committed meanwhile were never heard by the second: before, their devices stayed
// `offline` with `last_seen: null` in the second's views for good (until their next message),
// while its own `?status=online` filter, which reads the table, listed them online. Now the
// second reads the stored times again when it listens again.
import crypto from 'node:crypto';
import { afterAll, describe, expect, it } from 'vitest';
import type { DevicesCreated, TemplateCreated } from '../helpers/api.js';
import { listenBlockingProxy } from '../helpers/faults.js';
import { deviceClient, eventually } from '../helpers/registry-fixtures.js';
import { http, login, tenantToken, testEnv, useSpawnedServices } from '../helpers/service.js';

const LIVE_LISTEN_APP = 'device-registry-live-listen';
const DEVICES = 12;

const spawned = useSpawnedServices();
const cleanups: (() => Promise<unknown>)[] = [];
afterAll(async () => {
  for (const c of cleanups.reverse()) await c().catch(() => undefined);
});

describe('device status after the live LISTEN connection was lost', () => {
  it("the other instance's commits of the meantime show in the views once it listens again", async () => {
    const env = await testEnv({
      INGEST_WORKERS: '1',
      MQTT_SUBSCRIBER_CONNECTIONS: '1',
      JWT_SECRET: crypto.randomBytes(24).toString('hex'),
      LOG_LEVEL: 'info',
      LOG_FORMAT: 'json',
    });
    const a = await spawned.ready(env);
    const proxy = await listenBlockingProxy(env.DATABASE_URL!, LIVE_LISTEN_APP);
    cleanups.push(() => proxy.close());
    const b = await spawned.ready({ ...env, DATABASE_URL: proxy.url, DATA_DIR: (await testEnv()).DATA_DIR });
    const tenant = `rl${crypto.randomBytes(3).toString('hex')}`;
    const token = await tenantToken(a.base, await login(a.base), tenant);
    const t = await http<TemplateCreated>('POST', `${a.base}/template`, {
      token,
      body: { label: 'counter', attrs: [{ label: 'n', type: 'dynamic', value_type: 'integer' }] },
    });
    const d = await http<DevicesCreated>('POST', `${a.base}/device?count=${DEVICES}`, {
      token,
      body: { label: 'c', templates: [t.body.template.id] },
    });
    const ids = d.body.devices.map((x) => x.id);

    proxy.block();
    // Each device one message while the second instance cannot listen (the broker's shared
    // subscription gives the first instance its share of them).
    await Promise.all(
      ids.map(async (id) => {
        const c = await deviceClient(env.MQTT_URL!, { username: `${tenant}:${id}` });
        await c.publishAsync(`${tenant}:${id}/attrs`, JSON.stringify({ n: 1 }), { qos: 1 });
        await c.endAsync();
      }),
    );
    await new Promise((r) => setTimeout(r, 2000));
    proxy.unblock();

    type View = { id: string; last_seen: string | null; status: string };
    const views = async (base: string) =>
      (
        await http<{ devices: View[] }>('GET', `${base}/device/template/${t.body.template.id}?withStatus=true&page_size=100`, { token })
      ).body.devices
        .map((v) => `${v.id} ${v.status} ${v.last_seen}`)
        .sort();
    // The first instance's views: every device online.
    const expected = await eventually(async () => {
      const v = await views(a.base);
      return v.every((line) => line.includes(' online ')) ? v : undefined;
    }, 'every device online on the first instance');
    expect(expected).toHaveLength(DEVICES);
    // The second agrees once it listens again (reopened 1 s after each loss, then the table read).
    await eventually(
      async () => JSON.stringify(await views(b.base)) === JSON.stringify(expected) || undefined,
      'the same views on the second instance',
      10_000,
    );
    expect(await views(b.base)).toEqual(expected);
  }, 60_000);
});
