// Device messages through the run's broker (aedes, or Mosquitto with TEST_MQTT_URL) into history:
// both topic layouts, every validation and conversion rule, translators, the timestamp key,
// unknown devices, bad payloads, metrics, cache invalidation by registry events, and order.
import crypto from 'node:crypto';
import type mqtt from 'mqtt';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { HistoryByLabel, HistoryRecord } from '../helpers/api.js';
import { stringMatching } from '../helpers/matchers.js';
import { http, login, startTestService, type TestService } from '../helpers/service.js';
import {
  addTemplateAttrs,
  createDevice,
  createTemplate,
  deviceClient,
  eventually,
  historyCount,
  metric,
  notifySink,
  type AttrSpec,
} from '../helpers/registry-fixtures.js';

let svc: TestService;
let token: string;
let publisher: mqtt.MqttClient;
const tenant = `ing${crypto.randomBytes(3).toString('hex')}`;
let templateId: number;

const ATTRS: AttrSpec[] = [
  { label: 'temperature', type: 'dynamic', value_type: 'float' },
  { label: 'count', type: 'dynamic', value_type: 'integer' },
  { label: 'on', type: 'dynamic', value_type: 'bool' },
  { label: 'name', type: 'dynamic', value_type: 'string' },
  { label: 'position', type: 'dynamic', value_type: 'geopoint' },
  { label: 'extra', type: 'dynamic', value_type: 'object' },
  { label: 'target', type: 'actuator', value_type: 'float' },
  { label: 'serial', type: 'static', value_type: 'string', static_value: 'SN-1' },
];

beforeAll(async () => {
  // The value tests read one device's back-to-back messages in publish order: with several
  // subscriber connections the broker may deliver them in either order (docs/messaging.md, "Order").
  svc = await startTestService({ MQTT_SUBSCRIBER_CONNECTIONS: '1' });
  token = await login(svc.base);
  // Rows are queried as the admin user: its tenant must be the fixtures' tenant.
  const res = await http('POST', `${svc.base}/auth/user`, {
    token,
    body: { username: `u-${tenant}`, passwd: 'pw-123456', service: tenant, profile: 'admin' },
  });
  expect(res.status).toBe(201);
  token = await login(svc.base, `u-${tenant}`, 'pw-123456');
  templateId = await createTemplate(svc.service.pool, tenant, 'sensor', ATTRS);
  publisher = await deviceClient(svc.env.MQTT_URL!);
});
afterAll(async () => {
  await publisher?.endAsync();
  await svc?.stop();
});

async function newDevice(extra: AttrSpec[] = [], overrides?: Record<string, string>): Promise<string> {
  const templates = [templateId];
  if (extra.length > 0) templates.push(await createTemplate(svc.service.pool, tenant, 'extra', extra));
  return createDevice(svc.service.pool, tenant, templates, { ...(overrides ? { overrides } : {}) });
}

async function send(device: string, payload: unknown, opts: { legacy?: boolean; raw?: string | Buffer } = {}): Promise<void> {
  const topic = opts.legacy ? `/${tenant}/${device}/attrs` : `${tenant}:${device}/attrs`;
  await publisher.publishAsync(topic, opts.raw ?? JSON.stringify(payload), { qos: 1 });
}

async function history<T = HistoryByLabel>(device: string, query = ''): Promise<T> {
  const res = await http<T>('GET', `${svc.base}/history/device/${device}/history${query}`, { token });
  expect(res.status).toBe(200);
  return res.body;
}

/** Waits until the device has `n` stored values, then returns all of them by label. */
async function stored(device: string, n: number): Promise<HistoryByLabel> {
  try {
    await eventually(async () => (await historyCount(svc.service.pool, tenant, device)) >= n || undefined, `${n} values of ${device}`);
  } catch (err) {
    // What the service saw meanwhile, so that a failure here says where the message went.
    const seen = (await metrics()).split('\n').filter((l) => /^(ingest_|broker_link_)/.test(l) && !l.includes('_bucket'));
    throw new Error(`${(err as Error).message}\n${seen.join('\n')}`);
  }
  return history(device);
}

async function metrics(): Promise<string> {
  return (await http('GET', `${svc.base}/metrics`)).text;
}

/** A message that must produce nothing; a second, valid message proves the first was handled. */
async function sendThenMarker(device: string, first: () => Promise<void>): Promise<HistoryByLabel> {
  await first();
  await send(device, { name: 'marker' });
  const all = await stored(device, 1);
  expect(all.name!.map((r) => r.value)).toEqual(['marker']);
  return all;
}

describe('topics', () => {
  it('default layout <tenant>:<id>/attrs: values are stored with the record shape of the contract', async () => {
    const d = await newDevice();
    await send(d, { temperature: 21.5 });
    const all = await stored(d, 1);
    expect(all.temperature).toHaveLength(1);
    expect(all.temperature![0]).toEqual({
      device_id: d,
      ts: stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$/),
      value: 21.5,
      attr: 'temperature',
    });
  });

  it('legacy layout /<tenant>/<id>/attrs', async () => {
    const d = await newDevice();
    await send(d, { temperature: 3 }, { legacy: true });
    expect((await stored(d, 1)).temperature!.map((r) => r.value)).toEqual([3]);
  });

  it('a device of another tenant, or no device at all, stores nothing and counts unknown_device', async () => {
    const before = metric(await metrics(), 'ingest_dropped_total{reason="unknown_device"}');
    const d = await newDevice();
    await publisher.publishAsync(`other-${tenant}:${d}/attrs`, JSON.stringify({ temperature: 1 }), { qos: 1 });
    await publisher.publishAsync(`${tenant}:nosuch/attrs`, JSON.stringify({ temperature: 1 }), { qos: 1 });
    await eventually(
      async () => metric(await metrics(), 'ingest_dropped_total{reason="unknown_device"}') >= before + 2 || undefined,
      'unknown_device drops',
    );
    expect(await historyCount(svc.service.pool, `other-${tenant}`)).toBe(0);
    expect(await historyCount(svc.service.pool, tenant, 'nosuch')).toBe(0);
  });
});

describe('values', () => {
  it('stores dynamic and actuator attributes, drops unknown keys and static attributes', async () => {
    const d = await newDevice();
    await send(d, { temperature: 1.25, target: 7, serial: 'X', nope: 1 });
    const all = await stored(d, 2);
    expect(all.temperature!.map((r) => r.value)).toEqual([1.25]);
    expect(all.target!.map((r) => r.value)).toEqual([7]);
    expect(all.serial).toEqual([]);
    expect(Object.keys(all)).not.toContain('nope');
  });

  it('float: numbers and numeric strings, converted to numbers; anything else dropped', async () => {
    const d = await newDevice();
    await send(d, { temperature: '22.75' });
    await send(d, { temperature: 'warm' });
    await send(d, { temperature: true });
    await send(d, { temperature: null });
    await send(d, { temperature: -4 });
    await send(d, { name: 'done' });
    await stored(d, 3);
    const values = (await history<HistoryRecord[]>(d, '?attr=temperature&firstN=10')).map((r) => r.value);
    expect(values).toEqual([22.75, -4]);
  });

  it('integer: integral numbers and numeric strings; 2.5 and "2.5" are dropped', async () => {
    const d = await newDevice();
    for (const v of [5, '6', 2.5, '2.5', 'x', 7.0]) await send(d, { count: v });
    await send(d, { name: 'done' });
    await stored(d, 4);
    expect((await history<HistoryRecord[]>(d, '?attr=count&firstN=10')).map((r) => r.value)).toEqual([5, 6, 7]);
  });

  it('bool: only booleans', async () => {
    const d = await newDevice();
    for (const v of [true, 'true', 1, false]) await send(d, { on: v });
    await send(d, { name: 'done' });
    await stored(d, 3);
    expect((await history<HistoryRecord[]>(d, '?attr=on&firstN=10')).map((r) => r.value)).toEqual([true, false]);
  });

  it('string: only strings, kept as strings (also ones that look like numbers)', async () => {
    const d = await newDevice();
    for (const v of ['hello', 12, '12', { a: 1 }, 'tab\there "quoted" \\ back']) await send(d, { name: v });
    await stored(d, 3);
    expect((await history<HistoryRecord[]>(d, '?attr=name&firstN=10')).map((r) => r.value)).toEqual([
      'hello',
      '12',
      'tab\there "quoted" \\ back',
    ]);
  });

  it('geopoint: "lat,lon" within range', async () => {
    const d = await newDevice();
    for (const v of ['-22.81,-47.06', '91,0', 'here', [1, 2], '10.5, 20']) await send(d, { position: v });
    await send(d, { name: 'done' });
    await stored(d, 3);
    expect((await history<HistoryRecord[]>(d, '?attr=position&firstN=10')).map((r) => r.value)).toEqual(['-22.81,-47.06', '10.5, 20']);
  });

  it('other value types take any JSON value and keep its type', async () => {
    const d = await newDevice();
    await send(d, { extra: { nested: [1, 'two', null] } });
    await send(d, { extra: [1, 2] });
    await send(d, { extra: 'text' });
    await stored(d, 3);
    expect((await history<HistoryRecord[]>(d, '?attr=extra&firstN=10')).map((r) => r.value)).toEqual([
      { nested: [1, 'two', null] },
      [1, 2],
      'text',
    ]);
  });

  it('wrong types and unknown keys are counted; the other values of the message are stored', async () => {
    const before = await metrics();
    const d = await newDevice();
    await send(d, { temperature: 'hot', count: 1, nope: 2, other: 3 });
    expect((await stored(d, 1)).count!.map((r) => r.value)).toEqual([1]);
    await eventually(async () => {
      const after = await metrics();
      return (
        (metric(after, 'ingest_dropped_total{reason="wrong_type"}') >= metric(before, 'ingest_dropped_total{reason="wrong_type"}') + 1 &&
          metric(after, 'ingest_dropped_total{reason="unknown_key"}') >=
            metric(before, 'ingest_dropped_total{reason="unknown_key"}') + 2) ||
        undefined
      );
    }, 'wrong_type and unknown_key counts');
  });

  it('a value nested too deep to store is dropped as wrong_type, acknowledged, and the rest of the message is stored', async () => {
    const before = metric(await metrics(), 'ingest_dropped_total{reason="wrong_type"}');
    const d = await newDevice();
    // 40 KB, under MAX_MESSAGE_BYTES: JSON.parse takes it, JSON.stringify overflows the stack.
    await send(d, undefined, { raw: '{"extra":' + '['.repeat(20000) + ']'.repeat(20000) + ',"temperature":777}' });
    expect((await stored(d, 1)).temperature!.map((r) => r.value)).toEqual([777]);
    expect((await history<HistoryRecord[]>(d, '?attr=extra')).length).toBe(0);
    await eventually(
      async () => metric(await metrics(), 'ingest_dropped_total{reason="wrong_type"}') >= before + 1 || undefined,
      'wrong_type',
    );
  });
});

describe('bad messages', () => {
  it.each([
    ['not_json', '{"temperature": 1', undefined],
    ['not_object', '[{"temperature": 1}]', undefined],
    ['not_object', '42', undefined],
    ['not_object', 'null', undefined],
  ])('%s (%s): dropped and counted, nothing stored', async (reason, raw) => {
    const before = metric(await metrics(), `ingest_dropped_total{reason="${reason}"}`);
    const d = await newDevice();
    const all = await sendThenMarker(d, () => send(d, null, { raw }));
    expect(all.temperature).toEqual([]);
    await eventually(async () => metric(await metrics(), `ingest_dropped_total{reason="${reason}"}`) >= before + 1 || undefined, reason);
  });

  it('oversized (over MAX_MESSAGE_BYTES): dropped and counted, the service keeps going', async () => {
    const before = metric(await metrics(), 'ingest_dropped_total{reason="oversized"}');
    const d = await newDevice();
    const big = JSON.stringify({ temperature: 1, name: 'x'.repeat(70 * 1024) });
    const all = await sendThenMarker(d, () => send(d, null, { raw: big }));
    expect(all.temperature).toEqual([]);
    await eventually(
      async () => metric(await metrics(), 'ingest_dropped_total{reason="oversized"}') >= before + 1 || undefined,
      'oversized',
    );
  });

  it('a payload that is not UTF-8 is not JSON: dropped as not_json, nothing of it stored, the batch goes on', async () => {
    const before = metric(await metrics(), 'ingest_dropped_total{reason="not_json"}');
    const d = await newDevice();
    await send(d, null, { raw: Buffer.concat([Buffer.from('{"temperature":4,"name":"a'), Buffer.from([0xff, 0xfe]), Buffer.from('b"}')]) });
    await send(d, { temperature: 5, name: 'é' });
    const all = await stored(d, 2);
    expect(all.name!.map((r) => r.value)).toEqual(['é']);
    expect(all.temperature!.map((r) => r.value)).toEqual([5]);
    await eventually(async () => metric(await metrics(), 'ingest_dropped_total{reason="not_json"}') >= before + 1 || undefined, 'not_json');
  });
});

describe('timestamp key', () => {
  it('epoch milliseconds set ts; the key itself is not stored', async () => {
    const d = await newDevice();
    await send(d, { temperature: 1, timestamp: Date.UTC(2024, 0, 2, 3, 4, 5, 678) });
    const all = await stored(d, 1);
    expect(all.temperature![0]!.ts).toBe('2024-01-02T03:04:05.678000Z');
  });

  it('ISO 8601 sets ts (with offset, with microseconds, without zone = UTC)', async () => {
    const d = await newDevice();
    await send(d, { temperature: 1, timestamp: '2024-03-01T10:00:00.123456+02:00' });
    await send(d, { temperature: 2, timestamp: '2024-03-01T09:00:00' });
    await stored(d, 2);
    const rows = await history<HistoryRecord[]>(d, '?attr=temperature&firstN=5');
    expect(rows.map((r) => [r.value, r.ts])).toEqual([
      [1, '2024-03-01T08:00:00.123456Z'],
      [2, '2024-03-01T09:00:00.000000Z'],
    ]);
  });

  it('an unreadable timestamp is ignored and counted (bad_timestamp): the values keep the receive time', async () => {
    const before = metric(await metrics(), 'ingest_dropped_total{reason="bad_timestamp"}');
    const d = await newDevice();
    const sent = Date.now();
    await send(d, { temperature: 1, timestamp: 'yesterday' });
    await send(d, { temperature: 2, timestamp: '2024-02-30T00:00:00Z' });
    await send(d, { temperature: 3, timestamp: null });
    const all = await stored(d, 3);
    expect(all.temperature!.map((r) => r.value).sort()).toEqual([1, 2, 3]);
    for (const r of all.temperature!) expect(Math.abs(Date.parse(r.ts) - sent)).toBeLessThan(60_000);
    await eventually(
      async () => metric(await metrics(), 'ingest_dropped_total{reason="bad_timestamp"}') >= before + 3 || undefined,
      'bad_timestamp',
    );
  });

  it('a device with an attribute labelled timestamp stores it as a value, and ts is the receive time', async () => {
    const d = await newDevice([{ label: 'timestamp', type: 'dynamic', value_type: 'integer' }]);
    const sent = Date.now();
    await send(d, { timestamp: 12345, temperature: 9 });
    const all = await stored(d, 2);
    expect(all.timestamp!.map((r) => r.value)).toEqual([12345]);
    expect(Date.parse(all.temperature![0]!.ts)).toBeGreaterThanOrEqual(sent - 60_000);
  });
});

describe('translators (meta-translator attributes, RFC 6902)', () => {
  it('move a plain key to a tagged label before the key filter', async () => {
    const d = await newDevice([
      { label: 'tag_humidity', type: 'dynamic', value_type: 'float' },
      {
        label: 'tr1',
        type: 'meta-translator',
        value_type: 'string',
        static_value: '{"op":"move","from":"/humidity","path":"/tag_humidity"}',
      },
    ]);
    await send(d, { humidity: 55.5 });
    const all = await stored(d, 1);
    expect(all.tag_humidity!.map((r) => r.value)).toEqual([55.5]);
  });

  it('a failing required translator drops the message; an optional one is skipped', async () => {
    const d = await newDevice([
      { label: 'tag_a', type: 'dynamic', value_type: 'float' },
      {
        label: 'tr_opt',
        type: 'meta-translator',
        value_type: 'string',
        static_value: '{"op":"move","from":"/x","path":"/tag_x","optional":true}',
      },
      { label: 'tr_req', type: 'meta-translator', value_type: 'string', static_value: '{"op":"move","from":"/a","path":"/tag_a"}' },
    ]);
    const before = metric(await metrics(), 'ingest_dropped_total{reason="translation_failed"}');
    await send(d, { temperature: 1 }); // no /a: the required move fails
    await send(d, { a: 2, temperature: 3 });
    const all = await stored(d, 2);
    expect(all.tag_a!.map((r) => r.value)).toEqual([2]);
    expect(all.temperature!.map((r) => r.value)).toEqual([3]);
    await eventually(
      async () => metric(await metrics(), 'ingest_dropped_total{reason="translation_failed"}') >= before + 1 || undefined,
      'translation_failed',
    );
  });

  it('the device override of a translator wins over the template value', async () => {
    const d = await newDevice(
      [
        { label: 'tag_b', type: 'dynamic', value_type: 'float' },
        { label: 'tr', type: 'meta-translator', value_type: 'string', static_value: '{"op":"move","from":"/wrong","path":"/tag_b"}' },
      ],
      { tr: '{"op":"move","from":"/b","path":"/tag_b"}' },
    );
    await send(d, { b: 4 });
    expect((await stored(d, 1)).tag_b!.map((r) => r.value)).toEqual([4]);
  });
});

describe('registry events', () => {
  it('a template change reaches the shard caches: a new attribute is stored at once', async () => {
    const t = await createTemplate(svc.service.pool, tenant, 'grows', [{ label: 'a1', type: 'dynamic', value_type: 'float' }]);
    const d = await createDevice(svc.service.pool, tenant, [t]);
    await send(d, { a1: 1, a2: 1 });
    await stored(d, 1); // cached now, without a2
    await addTemplateAttrs(svc.service.pool, svc.service.events, tenant, t, [{ label: 'a2', type: 'dynamic', value_type: 'float' }]);
    await send(d, { a1: 2, a2: 2 });
    const all = await stored(d, 3);
    expect(all.a2!.map((r) => r.value)).toEqual([2]);
  });

  it('an event from another instance (PostgreSQL NOTIFY) reaches the shard caches too', async () => {
    const t = await createTemplate(svc.service.pool, tenant, 'grows-remote', [{ label: 'b1', type: 'dynamic', value_type: 'float' }]);
    const d = await createDevice(svc.service.pool, tenant, [t]);
    await send(d, { b1: 1, b2: 1 });
    await stored(d, 1);
    await addTemplateAttrs(svc.service.pool, notifySink(svc.service.pool), tenant, t, [
      { label: 'b2', type: 'dynamic', value_type: 'float' },
    ]);
    // NOTIFY is asynchronous: send until the new attribute is accepted.
    await eventually(async () => {
      await send(d, { b2: 2 });
      return (await history<HistoryRecord[]>(d, '?attr=b2&lastN=1')).length > 0 || undefined;
    }, 'the new attribute after the NOTIFY');
  });

  it('a device created after its first (dropped) message is stored once the registry says so', async () => {
    const id = crypto.randomBytes(3).toString('hex');
    const before = metric(await metrics(), 'ingest_dropped_total{reason="unknown_device"}');
    await send(id, { temperature: 1 }); // unknown: cached as absent
    await eventually(
      async () => metric(await metrics(), 'ingest_dropped_total{reason="unknown_device"}') > before || undefined,
      'the drop',
    );
    await createDevice(svc.service.pool, tenant, [templateId], { id, events: svc.service.events });
    await send(id, { temperature: 2 });
    const all = await stored(id, 1);
    // (Other test files' messages count as unknown devices here too, so the first message may
    // still have been on its way: then it is stored as well.)
    expect(all.temperature!.map((r) => r.value)).toContain(2);
  });
});

describe('order and volume', () => {
  it('many devices and messages: every value stored, per-device receive order kept within one connection', async () => {
    const devices = await Promise.all(Array.from({ length: 20 }, () => newDevice()));
    const perDevice = 25;
    const sends: Array<Promise<void>> = [];
    for (let i = 0; i < perDevice; i++) for (const d of devices) sends.push(send(d, { count: i }));
    await Promise.all(sends);
    await eventually(
      async () =>
        (await Promise.all(devices.map((d) => historyCount(svc.service.pool, tenant, d)))).every((n) => n === perDevice) || undefined,
      'all values',
    );
    if (!svc.env.MQTT_URL || svc.service.config.mqttSubscriberConnections === 1 || !process.env.TEST_MQTT_URL) {
      // One subscriber connection (aedes: MQTT 3.1.1): arrival order is publish order.
      for (const d of devices) {
        expect((await history<HistoryRecord[]>(d, `?attr=count&firstN=${perDevice}`)).map((r) => r.value)).toEqual([
          ...Array(perDevice).keys(),
        ]);
      }
    }
  });

  it('metrics count messages, values, batches, COPY durations and cache use', async () => {
    const text = await metrics();
    for (const name of [
      'ingest_messages_received_total',
      'ingest_messages_stored_total',
      'ingest_values_received_total',
      'ingest_values_stored_total',
      'ingest_cache_hits_total',
      'ingest_cache_misses_total',
    ]) {
      expect(metric(text, name)).toBeGreaterThan(0);
    }
    expect(text).toMatch(/ingest_batch_rows_count \d+/);
    expect(text).toMatch(/ingest_copy_duration_seconds_bucket\{le="0.05"\} \d+/);
    expect(text).toMatch(/ingest_queue_depth\{shard="0"\} \d+/);
    expect(text).toMatch(/ingest_cached_devices\{shard="0"\} \d+/);
  });
});
