// Device status across instances when the live fan-out's LISTEN connection is lost (docs/live.md
// §1 and §4). Two instances on one database; the second reaches the database through a proxy
// that keeps its live LISTEN connection away for a while, and has a broker of its own where no
// device publishes (so every message is the first's to commit, with any broker: a broker without
// shared subscriptions would give the second each message too). The same holds for an instance
// that starts while another holds device status it has not written yet. Messages the first
// instance committed meanwhile were never heard by the second: before, their devices stayed
// `offline` with `last_seen: null` in the second's views for good (until their next message),
// while its own `?status=online` filter, which reads the table, listed them online. Now the
// second reads the stored times again when it listens again, once the first has written what it
// held (it answers the second's hello when it has). DEVICE_STATUS_FLUSH_MS is a minute here, so
// that the first instance's timed writes come too late: before, the second read the table after
// a fixed wait (two flush periods) and missed what a slow first instance wrote after it.
import crypto from 'node:crypto';
import { afterAll, describe, expect, it } from 'vitest';
import { listenBlockingProxy } from '../helpers/faults.js';
import { createDevices, createTemplate } from '../helpers/registry-api.js';
import { deviceClient, eventually } from '../helpers/registry-fixtures.js';
import { http, login, tenantToken, testEnv, useSpawnedServices } from '../helpers/service.js';
import { quietBroker } from './quiet-broker.js';

const LIVE_LISTEN_APP = 'device-registry-live-listen';
const DEVICES = 12;

const spawned = useSpawnedServices();
const cleanups: (() => Promise<unknown>)[] = [];
afterAll(async () => {
  for (const c of cleanups.reverse()) await c().catch(() => undefined);
});

type View = { id: string; last_seen: string | null; status: string };

/** A broker no device publishes to, for the second instance; closed after the file. */
async function quietBrokerUrl(): Promise<string> {
  const broker = await quietBroker();
  cleanups.push(() => broker.close());
  return broker.url;
}

/** The first instance, a tenant with DEVICES devices of one template, and the views of any instance. */
async function firstInstance() {
  const env = await testEnv({
    INGEST_WORKERS: '1',
    MQTT_SUBSCRIBER_CONNECTIONS: '1',
    JWT_SECRET: crypto.randomBytes(24).toString('hex'),
    LOG_LEVEL: 'info',
    LOG_FORMAT: 'json',
    DEVICE_STATUS_FLUSH_MS: '60000',
  });
  const a = await spawned.ready(env);
  const tenant = `rl${crypto.randomBytes(3).toString('hex')}`;
  const token = await tenantToken(a.base, await login(a.base), tenant);
  const t = await createTemplate(a.base, token, { label: 'counter', attrs: [{ label: 'n', type: 'dynamic', value_type: 'integer' }] });
  const ids = (await createDevices(a.base, token, { label: 'c', templates: [t.id] }, `?count=${DEVICES}`)).map((x) => x.id);
  const views = async (base: string) =>
    (await http<{ devices: View[] }>('GET', `${base}/device/template/${t.id}?withStatus=true&page_size=100`, { token })).body.devices
      .map((v) => `${v.id} ${v.status} ${v.last_seen}`)
      .sort();
  return {
    env,
    a,
    views,
    /** Each device one message, committed by the first instance (the second's broker is another), or by the one of `mqttUrl`. */
    publishAll: (mqttUrl = env.MQTT_URL!) =>
      Promise.all(
        ids.map(async (id) => {
          const c = await deviceClient(mqttUrl, { username: `${tenant}:${id}` });
          await c.publishAsync(`${tenant}:${id}/attrs`, JSON.stringify({ n: 1 }), { qos: 1 });
          await c.endAsync();
        }),
      ),
    /** The first instance's views once every device is online there. */
    onlineOnFirst: async () => {
      const v = await eventually(async () => {
        const v = await views(a.base);
        return v.every((line) => line.includes(' online ')) ? v : undefined;
      }, 'every device online on the first instance');
      expect(v).toHaveLength(DEVICES);
      return v;
    },
  };
}

/** The second instance comes to the first's views (it reads the table once the first has written), or the other way round. */
async function agrees(views: (base: string) => Promise<string[]>, base: string, expected: string[], which = 'second'): Promise<void> {
  await eventually(
    async () => JSON.stringify(await views(base)) === JSON.stringify(expected) || undefined,
    `the same views on the ${which} instance`,
    10_000,
  );
  expect(await views(base)).toEqual(expected);
}

describe('device status across instances', () => {
  /**
   * A second instance whose database connections of application `app` go through a proxy the
   * test can block; it commits (the devices publish to its own broker), the first only reads.
   */
  async function secondBehindProxy(first: Awaited<ReturnType<typeof firstInstance>>, app: string) {
    const proxy = await listenBlockingProxy(first.env.DATABASE_URL!, app);
    cleanups.push(() => proxy.close());
    const env = { ...first.env, DATABASE_URL: proxy.url, MQTT_URL: await quietBrokerUrl(), DATA_DIR: (await testEnv()).DATA_DIR };
    return { env, proxy, b: await spawned.ready(env) };
  }

  /** Once the second instance (at `base`) shows every device online, the first shows the same views. */
  async function firstAgreesWhenAllOnline(first: Awaited<ReturnType<typeof firstInstance>>, base: string) {
    const expected = await eventually(async () => {
      const v = await first.views(base);
      return v.every((line) => line.includes(' online ')) ? v : undefined;
    }, 'every device online on the second instance');
    expect(expected).toHaveLength(DEVICES);
    await agrees(first.views, first.a.base, expected, 'first');
  }

  it("the other instance's commits of the meantime show in the views once it listens again", async () => {
    const first = await firstInstance();
    const { b, proxy } = await secondBehindProxy(first, LIVE_LISTEN_APP);

    proxy.block();
    await first.publishAll();
    await new Promise((r) => setTimeout(r, 2000));
    proxy.unblock();

    const expected = await first.onlineOnFirst();
    // (the LISTEN connection is reopened 1 s after each loss)
    await agrees(first.views, b.base, expected);
  }, 60_000);

  // The mirror case: the instance whose LISTEN connection is away is the one that commits. Once
  // it had heard no other instance for 15 s (its hellos' lifetime) it stopped sending its
  // telemetry, and when it listened again only it read the table back: the other instance, whose
  // own connection never dropped, kept those devices `offline` with `last_seen: null` in its
  // views, while its `?status=online` listed them (found by an audit). Now the instance that
  // committed unsent writes what it holds on hearing the other again and tells it `written`.
  it('an instance whose LISTEN connection was away for long has the others read what it committed meanwhile', async () => {
    const first = await firstInstance();
    const { env, b, proxy } = await secondBehindProxy(first, LIVE_LISTEN_APP);

    proxy.block();
    // (past the hellos' lifetime: the second now sends nothing)
    await new Promise((r) => setTimeout(r, 17_000));
    await first.publishAll(env.MQTT_URL);
    proxy.unblock();

    await firstAgreesWhenAllOnline(first, b.base);
  }, 90_000);

  // A NOTIFY that failed (the sending connection lost, here cut by a proxy while the devices
  // publish): the other instance never heard those commits and, its own connections being fine,
  // never read the table again (found by an audit). Now it is told `written` once heard again.
  it('an instance whose NOTIFY of committed telemetry failed has the others read what it committed', async () => {
    const first = await firstInstance();
    const { env, b, proxy } = await secondBehindProxy(first, 'device-registry-live-notify');

    proxy.block();
    await first.publishAll(env.MQTT_URL);
    await new Promise((r) => setTimeout(r, 1500)); // (committed, and the NOTIFY failed)
    proxy.unblock();

    await firstAgreesWhenAllOnline(first, b.base);
  }, 90_000);

  it('an instance that starts while another has not written its device status yet shows it all the same', async () => {
    const first = await firstInstance();
    await first.publishAll();
    const expected = await first.onlineOnFirst();
    // (nothing written by the first for a minute: DEVICE_STATUS_FLUSH_MS)
    const b = await spawned.ready({ ...first.env, MQTT_URL: await quietBrokerUrl(), DATA_DIR: (await testEnv()).DATA_DIR });
    await agrees(first.views, b.base, expected);
  }, 60_000);
});
