// Device messages at the edges of the rules in docs/messaging.md §1 ("Validation and
// conversion"): an empty payload, a leading UTF-8 BOM, a payload of exactly MAX_MESSAGE_BYTES
// and one byte more (through the run's broker and through the embedded broker), a geopoint with
// blanks, `timestamp` as a date alone or before 1970, and translators that turn the whole
// message into something that is not an object.
import crypto from 'node:crypto';
import type mqtt from 'mqtt';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { HistoryByLabel, HistoryRecord } from '../helpers/api.js';
import { http, tenantToken, useService } from '../helpers/service.js';
import {
  createDevice,
  createTemplate,
  deviceClient,
  eventually,
  historyCount,
  metric,
  type AttrSpec,
} from '../helpers/registry-fixtures.js';

const MAX = 256;
const tenant = `ige${crypto.randomBytes(3).toString('hex')}`;
const ATTRS: AttrSpec[] = [
  { label: 'temperature', type: 'dynamic', value_type: 'float' },
  { label: 'name', type: 'dynamic', value_type: 'string' },
  { label: 'position', type: 'dynamic', value_type: 'geopoint' },
];
const BOM = Buffer.from([0xef, 0xbb, 0xbf]);

/** A JSON object payload of exactly `bytes` bytes (UTF-8), with two-byte characters in `name`. */
function payloadOf(bytes: number, temperature: number): Buffer {
  const base = Buffer.byteLength(JSON.stringify({ temperature, name: '' }));
  const fill = bytes - base;
  const text = JSON.stringify({ temperature, name: 'é'.repeat(Math.floor(fill / 2)) + 'x'.repeat(fill % 2) });
  const buf = Buffer.from(text, 'utf8');
  expect(buf.length).toBe(bytes);
  expect(text.length).toBeLessThan(bytes); // bytes, not characters, are what counts
  return buf;
}

const dropped = (text: string, reason: string) => metric(text, `ingest_dropped_total{reason="${reason}"}`);

describe('through the run broker (MQTT_URL), MAX_MESSAGE_BYTES=256', () => {
  const svc = useService({ MAX_MESSAGE_BYTES: String(MAX) });
  let token: string;
  let publisher: mqtt.MqttClient;
  let templateId: number;

  beforeAll(async () => {
    expect(svc.service.config.maxMessageBytes).toBe(MAX);
    token = await tenantToken(svc.base, svc.token, tenant);
    templateId = await createTemplate(svc.service.pool, tenant, 'sensor', ATTRS);
    publisher = await deviceClient(svc.env.MQTT_URL!);
  });
  afterAll(() => publisher?.endAsync());

  async function newDevice(extra: AttrSpec[] = []): Promise<string> {
    const templates = [templateId];
    if (extra.length > 0) templates.push(await createTemplate(svc.service.pool, tenant, 'extra', extra));
    return createDevice(svc.service.pool, tenant, templates);
  }

  const send = (device: string, payload: string | Buffer) => publisher.publishAsync(`${tenant}:${device}/attrs`, payload, { qos: 1 });

  async function history<T = HistoryByLabel>(device: string, query = ''): Promise<T> {
    const res = await http<T>('GET', `${svc.base}/history/device/${device}/history${query}`, { token });
    expect(res.status, res.text).toBe(200);
    return res.body;
  }

  async function stored(device: string, n: number): Promise<HistoryByLabel> {
    await eventually(async () => (await historyCount(svc.service.pool, tenant, device)) >= n || undefined, `${n} values of ${device}`);
    return history(device);
  }

  const metrics = async () => (await http('GET', `${svc.base}/metrics`)).text;

  async function droppedAtLeast(reason: string, n: number): Promise<void> {
    await eventually(async () => dropped(await metrics(), reason) >= n || undefined, `${n} ${reason} drops`);
  }

  /** Lets in-flight metric deltas arrive (the router reports every 250 ms). */
  const settle = () => new Promise((r) => setTimeout(r, 600));

  describe('payload bytes', () => {
    it('an empty payload is not JSON: dropped as not_json, nothing stored, the device goes on', async () => {
      const before = dropped(await metrics(), 'not_json');
      const d = await newDevice();
      await send(d, '');
      await droppedAtLeast('not_json', before + 1);
      await send(d, JSON.stringify({ name: 'after' }));
      const all = await stored(d, 1);
      expect(all).toEqual({ temperature: [], name: [expect.objectContaining({ value: 'after' })], position: [] });
      await settle();
      expect(await historyCount(svc.service.pool, tenant, d)).toBe(1);
    });

    it('a UTF-8 BOM followed by a JSON object: the BOM is ignored and the values are stored', async () => {
      const before = dropped(await metrics(), 'not_json');
      const d = await newDevice();
      await send(d, Buffer.concat([BOM, Buffer.from('{"temperature":7.5,"name":"bom"}')]));
      const all = await stored(d, 2);
      expect(all.temperature!.map((r) => r.value)).toEqual([7.5]);
      expect(all.name!.map((r) => r.value)).toEqual(['bom']);
      await settle();
      expect(dropped(await metrics(), 'not_json')).toBe(before);
    });

    it('a BOM followed by JSON that is not an object is not_object (the BOM is ignored, the other rules apply)', async () => {
      const before = dropped(await metrics(), 'not_object');
      const d = await newDevice();
      await send(d, Buffer.concat([BOM, Buffer.from('[{"temperature":1}]')]));
      await droppedAtLeast('not_object', before + 1);
      expect(await historyCount(svc.service.pool, tenant, d)).toBe(0);
    });

    it('exactly MAX_MESSAGE_BYTES bytes is processed; one byte more is dropped as oversized', async () => {
      const before = await metrics();
      const d = await newDevice();
      const atLimit = payloadOf(MAX, 256);
      const over = payloadOf(MAX + 1, 257);
      await send(d, over);
      await send(d, atLimit);
      const all = await stored(d, 2);
      expect(all.temperature!.map((r) => r.value)).toEqual([256]);
      expect(all.name!.map((r) => r.value)).toEqual([(JSON.parse(atLimit.toString('utf8')) as { name: string }).name]);
      await droppedAtLeast('oversized', dropped(before, 'oversized') + 1);
      await settle();
      // The oversized message left nothing behind (and the valid one is stored once).
      expect(await historyCount(svc.service.pool, tenant, d)).toBe(2);
      expect((await history<HistoryRecord[]>(d, '?attr=temperature')).map((r) => r.value)).toEqual([256]);
    });

    it('MAX_MESSAGE_BYTES - 1 bytes is processed too', async () => {
      const d = await newDevice();
      await send(d, payloadOf(MAX - 1, 255));
      expect((await stored(d, 2)).temperature!.map((r) => r.value)).toEqual([255]);
    });
  });

  describe('values and the timestamp key', () => {
    it('a geopoint with blanks around its numbers (" 10 , 20 ") fits and is stored as given', async () => {
      const d = await newDevice();
      await send(d, JSON.stringify({ position: ' 10 , 20 ' }));
      await send(d, JSON.stringify({ position: '-10.5 ,  20' }));
      await stored(d, 2);
      expect((await history<HistoryRecord[]>(d, '?attr=position&firstN=5')).map((r) => r.value)).toEqual([' 10 , 20 ', '-10.5 ,  20']);
    });

    it('a geopoint whose blanks split a number does not fit (wrong_type)', async () => {
      const before = dropped(await metrics(), 'wrong_type');
      const d = await newDevice();
      await send(d, JSON.stringify({ position: '1 0,20', name: 'marker' }));
      expect((await stored(d, 1)).position).toEqual([]);
      await droppedAtLeast('wrong_type', before + 1);
    });

    it('a number beyond a double (1e400) in a value of a type without a rule does not fit (wrong_type), rather than stored as null', async () => {
      const before = dropped(await metrics(), 'wrong_type');
      const d = await newDevice([{ label: 'reading', type: 'dynamic', value_type: 'object' }]);
      await send(d, '{"reading":1e400,"name":"m1"}');
      await send(d, '{"reading":{"x":[1,-1e400]},"name":"m2"}');
      await send(d, '{"reading":{"x":[null,1e300]},"name":"m3"}');
      const all = await stored(d, 4);
      expect(all.reading!.map((r) => r.value)).toEqual([{ x: [null, 1e300] }]);
      await droppedAtLeast('wrong_type', before + 2);
      await settle();
      expect(await historyCount(svc.service.pool, tenant, d)).toBe(4);
    });

    it('a date alone ("2024-05-01") is ISO 8601: midnight UTC of that day', async () => {
      const d = await newDevice();
      await send(d, JSON.stringify({ temperature: 1, timestamp: '2024-05-01' }));
      const all = await stored(d, 1);
      expect(all.temperature).toEqual([{ device_id: d, ts: '2024-05-01T00:00:00.000000Z', value: 1, attr: 'temperature' }]);
    });

    it('the first instant of 1970 is accepted (ISO and epoch ms 0)', async () => {
      const d = await newDevice();
      await send(d, JSON.stringify({ temperature: 1, timestamp: '1970-01-01T00:00:00Z' }));
      await send(d, JSON.stringify({ name: 'zero', timestamp: 0 }));
      const all = await stored(d, 2);
      expect(all.temperature!.map((r) => r.ts)).toEqual(['1970-01-01T00:00:00.000000Z']);
      expect(all.name!.map((r) => r.ts)).toEqual(['1970-01-01T00:00:00.000000Z']);
    });

    it('RFC 3339 lower case: a t between date and time, like a z zone, is read (it was bad_timestamp; found by an audit)', async () => {
      const d = await newDevice();
      await send(d, JSON.stringify({ temperature: 1, timestamp: '2024-05-01t12:00:00.5z' }));
      await send(d, JSON.stringify({ name: 'offset', timestamp: '2024-05-01t14:00:00+02:00' }));
      const all = await stored(d, 2);
      expect(all.temperature!.map((r) => r.ts)).toEqual(['2024-05-01T12:00:00.500000Z']);
      expect(all.name!.map((r) => r.ts)).toEqual(['2024-05-01T12:00:00.000000Z']);
    });

    it('a timestamp before 1970 (ISO, a date alone, negative epoch ms) is ignored as bad_timestamp: values keep the receive time', async () => {
      const before = dropped(await metrics(), 'bad_timestamp');
      const d = await newDevice();
      const sent = Date.now();
      await send(d, JSON.stringify({ temperature: 1, timestamp: '1969-12-31T23:59:59.999Z' }));
      await send(d, JSON.stringify({ temperature: 2, timestamp: '1969-07-20' }));
      await send(d, JSON.stringify({ temperature: 3, timestamp: -1 }));
      const all = await stored(d, 3);
      expect(all.temperature!.map((r) => r.value).sort()).toEqual([1, 2, 3]);
      for (const r of all.temperature!) expect(Math.abs(Date.parse(r.ts) - sent)).toBeLessThan(60_000);
      await droppedAtLeast('bad_timestamp', before + 3);
    });
  });

  describe('translators that replace the whole message', () => {
    const translated = (op: object) =>
      newDevice([
        {
          label: `tr${crypto.randomBytes(2).toString('hex')}`,
          type: 'meta-translator',
          value_type: 'string',
          static_value: JSON.stringify(op),
        },
      ]);

    it.each([
      ['a number', { op: 'replace', path: '', value: 42 }],
      ['an array', { op: 'replace', path: '', value: [{ temperature: 1 }] }],
      ['null', { op: 'replace', path: '', value: null }],
      ['a string (add at the root)', { op: 'add', path: '', value: '{"temperature":1}' }],
      ['nothing (remove the root)', { op: 'remove', path: '' }],
      ['a member that is a number (move it to the root)', { op: 'move', from: '/temperature', path: '' }],
      ['the same, optional', { op: 'replace', path: '', value: 42, optional: true }],
    ])('with %s: the message is dropped as not_object (the translator itself did not fail)', async (_what, op) => {
      const text = await metrics();
      const notObject = dropped(text, 'not_object');
      const failed = dropped(text, 'translation_failed');
      const d = await translated(op);
      await send(d, JSON.stringify({ temperature: 5, name: 'kept?' }));
      await droppedAtLeast('not_object', notObject + 1);
      await settle();
      const after = await metrics();
      expect(dropped(after, 'not_object')).toBe(notObject + 1);
      expect(dropped(after, 'translation_failed')).toBe(failed);
      expect(await historyCount(svc.service.pool, tenant, d)).toBe(0);
    });

    it('a root replaced by an object is a message like any other: its values are stored', async () => {
      const d = await translated({ op: 'move', from: '/inner', path: '' });
      await send(d, JSON.stringify({ inner: { temperature: 6, name: 'inner' }, temperature: 1 }));
      const all = await stored(d, 2);
      expect(all.temperature!.map((r) => r.value)).toEqual([6]);
      expect(all.name!.map((r) => r.value)).toEqual(['inner']);
    });
  });
});

describe('through the embedded broker, MAX_MESSAGE_BYTES=256', () => {
  const svc = useService({ MQTT_URL: undefined, MAX_MESSAGE_BYTES: String(MAX) });
  let url: string;
  let templateId: number;

  beforeAll(async () => {
    url = `mqtt://127.0.0.1:${svc.service.mqttPort}`;
    templateId = await createTemplate(svc.service.pool, tenant, 'sensor', ATTRS);
  });

  it('exactly MAX_MESSAGE_BYTES is stored, one byte more is acknowledged and counted once as oversized', async () => {
    const d = await createDevice(svc.service.pool, tenant, [templateId]);
    const c = await deviceClient(url, { username: `${tenant}:${d}` });
    const metrics = async () => (await http('GET', `${svc.base}/metrics`)).text;
    const before = dropped(await metrics(), 'oversized');
    try {
      // The embedded broker acknowledges after the commit (or the drop): each await is final.
      await c.publishAsync(`${tenant}:${d}/attrs`, payloadOf(MAX + 1, 257), { qos: 1 });
      expect(await historyCount(svc.service.pool, tenant, d)).toBe(0);
      await c.publishAsync(`${tenant}:${d}/attrs`, payloadOf(MAX, 256), { qos: 1 });
      expect(await historyCount(svc.service.pool, tenant, d)).toBe(2);
      const { rows } = await svc.service.pool.query<{ value: string }>(
        "SELECT value FROM history WHERE tenant = $1 AND device_id = $2 AND attr = 'temperature'",
        [tenant, d],
      );
      expect(rows.map((r) => r.value)).toEqual(['256']);
      expect(c.connected).toBe(true);
    } finally {
      await c.endAsync();
    }
    // Only this service's own broker feeds it: the count is exact.
    await eventually(async () => dropped(await metrics(), 'oversized') >= before + 1 || undefined, 'the oversized drop');
    await new Promise((r) => setTimeout(r, 600));
    expect(dropped(await metrics(), 'oversized')).toBe(before + 1);
  });
});
