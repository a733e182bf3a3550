// MAX_MESSAGE_BYTES (docs/messaging.md §1 "Validation and conversion"), counted in bytes, not
// characters: a payload of exactly the limit, or one byte less, is processed; one byte more is
// dropped as oversized and leaves nothing behind. Through the run's broker (MQTT_URL) and through
// the embedded broker, which acknowledges the oversized message and counts it once.
import crypto from 'node:crypto';
import { beforeAll, describe, expect, it } from 'vitest';
import type { HistoryRecord } from '../helpers/api.js';
import { dropped, SENSOR_ATTRS, useDeviceMessages } from '../helpers/device-messages.js';
import { createDevice, createTemplate, deviceClient, eventually, historyCount } from '../helpers/registry-fixtures.js';
import { http, useService } from '../helpers/service.js';

const MAX = 256;
const tenant = `ige${crypto.randomBytes(3).toString('hex')}`;

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

describe('through the run broker (MQTT_URL), MAX_MESSAGE_BYTES=256', () => {
  const svc = useService({ MAX_MESSAGE_BYTES: String(MAX) });

  beforeAll(() => {
    expect(svc.service.config.maxMessageBytes).toBe(MAX);
  });
  const { newDevice, send, history, stored, metrics, droppedAtLeast, settle } = useDeviceMessages(svc, tenant);

  describe('payload bytes', () => {
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
});

describe('through the embedded broker, MAX_MESSAGE_BYTES=256', () => {
  const svc = useService({ MQTT_URL: undefined, MAX_MESSAGE_BYTES: String(MAX) });
  let url: string;
  let templateId: number;

  beforeAll(async () => {
    url = `mqtt://127.0.0.1:${svc.service.mqttPort}`;
    templateId = await createTemplate(svc.service.pool, tenant, 'sensor', SENSOR_ATTRS);
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
