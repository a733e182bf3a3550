// Several instances (docs/live.md, "Several instances"): two service processes on one database
// and one broker (a shared subscription splits the devices' messages between them). A stream
// client of the first sees every committed message, those the second ingested included (LIVE_FANOUT:
// PostgreSQL NOTIFY), and the first's device views know when those devices were last seen.
import crypto from 'node:crypto';
import path from 'node:path';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { projectRoot } from '../../src/paths.js';
import { startMosquitto, type Mosquitto } from '../helpers/mosquitto.js';
import { createDevices, createTemplate } from '../helpers/registry-api.js';
import { deviceClient, eventually, metric } from '../helpers/registry-fixtures.js';
import { http, login, tenantToken, testEnv, useSpawnedServices } from '../helpers/service.js';
import { openWs } from './stream-client.js';

const spawned = useSpawnedServices();
let broker: Mosquitto | undefined;
afterAll(() => broker?.stop());
const DEVICES = 8;
const PER_DEVICE = 25;

/**
 * Two instances on one database and a Mosquitto of the test's own (shared subscriptions split the
 * messages between them; without the binary the test fails), and a fresh tenant's token.
 */
async function twoInstances(settings: Record<string, string>, prefix: string) {
  broker ??= await startMosquitto(path.join(projectRoot, 'test/ingest/fixtures/mosquitto.conf'));
  const first = await testEnv({
    MQTT_URL: broker.url,
    INGEST_WORKERS: '1',
    JWT_SECRET: crypto.randomBytes(24).toString('hex'),
    LOG_LEVEL: 'info',
    LOG_FORMAT: 'json',
    ...settings,
  });
  const a = await spawned.ready(first);
  const b = await spawned.ready({ ...first, DATA_DIR: (await testEnv()).DATA_DIR });
  const tenant = `${prefix}${crypto.randomBytes(3).toString('hex')}`;
  const token = await tenantToken(a.base, await login(a.base), tenant);
  return { a, b, tenant, token, brokerUrl: broker.url, databaseUrl: first.DATABASE_URL! };
}

describe('two instances', () => {
  it('a client of one instance sees what the other committed', async () => {
    // A Mosquitto of the test's own (shared subscriptions split the messages between the two);
    // without the binary the test fails.
    const { a, b, tenant, token, brokerUrl } = await twoInstances({ MQTT_SUBSCRIBER_CONNECTIONS: '2' }, 'fan');
    const t = await createTemplate(a.base, token, { label: 'counter', attrs: [{ label: 'n', type: 'dynamic', value_type: 'integer' }] });
    const ids = (await createDevices(a.base, token, { label: 'c', templates: [t.id] }, `?count=${DEVICES}`)).map((x) => x.id);
    const stream = await openWs(`${a.base.replace('http', 'ws')}/stream`, { token });
    await stream.next((m) => m.type === 'subscribed', 'subscribed');

    const url = brokerUrl;
    await Promise.all(
      ids.map(async (id) => {
        const c = await deviceClient(url, { username: `${tenant}:${id}` });
        for (let n = 0; n < PER_DEVICE; n++) await c.publishAsync(`${tenant}:${id}/attrs`, JSON.stringify({ n }), { qos: 1 });
        await c.endAsync();
      }),
    );
    const total = DEVICES * PER_DEVICE;
    await eventually(() => stream.messages.filter((m) => m.type === 'attrs').length >= total || undefined, `${total} messages`, 30_000);
    const got = stream.messages.filter((m) => m.type === 'attrs');
    expect(got).toHaveLength(total);
    for (const id of ids) {
      // Each one once. Not in order: the broker spreads one device's messages over both instances
      // (docs/live.md, §4).
      const ns = got.filter((m) => m.device_id === id).map((m) => (m.attrs as { n: number }).n);
      expect(ns.sort((x, y) => x - y)).toEqual([...Array(PER_DEVICE).keys()]);
    }
    // Both instances took a share of the messages.
    const stored = async (base: string) => metric((await http<string>('GET', `${base}/metrics`)).text, 'ingest_messages_stored_total');
    // (the metrics follow the commits by up to a quarter of a second)
    const [byA, byB] = await eventually(async () => {
      const both = [await stored(a.base), await stored(b.base)] as const;
      return both[0] + both[1] === total ? both : undefined;
    }, 'the stored counts');
    expect(byB).toBeGreaterThan(0);
    expect(byA).toBeGreaterThan(0);
    // Each heard the other, so each passed its share on.
    for (const base of [a.base, b.base])
      expect(metric((await http<string>('GET', `${base}/metrics`)).text, 'live_fanout_notifications_total')).toBeGreaterThan(0);
    // The first instance's views know every device was seen, whichever instance stored it.
    const views = await http<{ devices: Array<{ id: string; status: string }> }>('GET', `${a.base}/device?status=online`, { token });
    expect(views.body.devices.map((v) => v.id).sort()).toEqual([...ids].sort());

    // A message too large for one NOTIFY (~9 kB): its values are not passed on, but its device's
    // status is, so both instances' views agree whichever one stored it.
    const notes = await createTemplate(a.base, token, {
      label: 'notes',
      attrs: [{ label: 'note', type: 'dynamic', value_type: 'string' }],
    });
    const large = (await createDevices(a.base, token, { label: 'l', templates: [notes.id] }, '?count=8')).map((x) => x.id);
    await Promise.all(
      large.map(async (id) => {
        const c = await deviceClient(url, { username: `${tenant}:${id}` });
        await c.publishAsync(`${tenant}:${id}/attrs`, JSON.stringify({ note: 'y'.repeat(9000) }), { qos: 1 });
        await c.endAsync();
      }),
    );
    type StatusView = { last_seen: string | null; status: string };
    const statusOn = async (base: string, id: string) => (await http<StatusView>('GET', `${base}/device/${id}?withStatus`, { token })).body;
    for (const id of large) {
      const onA = await eventually(async () => ((await statusOn(a.base, id)).status === 'online' ? statusOn(a.base, id) : undefined), id);
      const onB = await eventually(async () => ((await statusOn(b.base, id)).status === 'online' ? statusOn(b.base, id) : undefined), id);
      expect(onB.last_seen).toBe(onA.last_seen);
    }
    const skipped = async (base: string) =>
      metric((await http<string>('GET', `${base}/metrics`)).text, 'live_fanout_skipped_messages_total');
    expect((await skipped(a.base)) + (await skipped(b.base))).toBe(large.length);
    stream.close();
  }, 180_000);

  it('a client of one instance is told of every device another created and every template it removed, by id, however many at once', async () => {
    // POST /device?count=1000 names 1,000 devices (~9 kB of ids): more than one NOTIFY holds. A
    // client of the instance that created them gets one `device` `created` naming them all; one
    // of the other instance used to get a bare `tenant` `changed` instead (the notification
    // degraded to a tenant-wide one), so it could not tell which devices were new. Likewise
    // DELETE /template of 900 templates with 8-digit ids (template ids are shared by all tenants,
    // so a large deployment's are long).
    const { a, b, token, databaseUrl } = await twoInstances({}, 'big');
    const t = await createTemplate(a.base, token, { label: 'many', attrs: [{ label: 'n', type: 'dynamic', value_type: 'integer' }] });
    const onA = await openWs(`${a.base.replace('http', 'ws')}/stream`, { token });
    const onB = await openWs(`${b.base.replace('http', 'ws')}/stream`, { token });
    await onA.next((m) => m.type === 'subscribed', 'subscribed on the first');
    await onB.next((m) => m.type === 'subscribed', 'subscribed on the second');

    const ids = (await createDevices(a.base, token, { label: 'm', templates: [t.id] }, '?count=1000')).map((x) => x.id);
    const named = (s: typeof onA) =>
      s.messages.filter((m) => m.type === 'device' && m.action === 'created').flatMap((m) => m.device_ids as string[]);
    await onA.next(() => named(onA).length >= ids.length, 'the creation on the first');
    await onB.next(() => named(onB).length >= ids.length || onB.messages.some((m) => m.type === 'tenant'), 'the creation on the second');
    // Heard on the second instance as on the first: every id once, nothing tenant-wide.
    expect(onB.messages.filter((m) => m.type === 'tenant')).toEqual([]);
    expect(named(onB).sort()).toEqual([...ids].sort());
    expect(named(onA).sort()).toEqual([...ids].sort());

    // 900 templates with ids past 10,000,000, then all removed at once on the first instance.
    const db = new pg.Client({ connectionString: databaseUrl });
    await db.connect();
    await db.query("SELECT setval('template_ids', 10000000)");
    await db.end();
    const tenant2 = `tpl${crypto.randomBytes(3).toString('hex')}`;
    const token2 = await tenantToken(a.base, await login(a.base), tenant2);
    const templateIds: string[] = [];
    for (let i = 0; i < 900; i++) templateIds.push(String((await createTemplate(a.base, token2, { label: `t${i}`, attrs: [] })).id));
    const tplOnA = await openWs(`${a.base.replace('http', 'ws')}/stream`, { token: token2 });
    const tplOnB = await openWs(`${b.base.replace('http', 'ws')}/stream`, { token: token2 });
    await tplOnA.next((m) => m.type === 'subscribed', 'subscribed on the first');
    await tplOnB.next((m) => m.type === 'subscribed', 'subscribed on the second');
    expect((await http('DELETE', `${a.base}/template`, { token: token2 })).status).toBe(200);
    const removed = (s: typeof onA) =>
      s.messages.filter((m) => m.type === 'template' && m.action === 'removed').flatMap((m) => m.template_ids as string[]);
    await tplOnA.next(() => removed(tplOnA).length >= templateIds.length, 'the removal on the first');
    await tplOnB.next(
      () => removed(tplOnB).length >= templateIds.length || tplOnB.messages.some((m) => m.type === 'tenant'),
      'the removal on the second',
    );
    expect(tplOnB.messages.filter((m) => m.type === 'tenant')).toEqual([]);
    expect(removed(tplOnB).sort()).toEqual([...templateIds].sort());
    expect(removed(tplOnA).sort()).toEqual([...templateIds].sort());
    for (const s of [onA, onB, tplOnA, tplOnB]) s.close();
  }, 180_000);
});
