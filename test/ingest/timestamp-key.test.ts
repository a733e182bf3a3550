// The `timestamp` key of a device message (docs/messaging.md §1 "Validation and conversion"): a
// date alone is ISO 8601 (midnight UTC), the first instant of 1970 is accepted, RFC 3339 in lower
// case is read, and a timestamp before 1970 is ignored as bad_timestamp (values keep the receive
// time).
import crypto from 'node:crypto';
import { beforeAll, describe, expect, it } from 'vitest';
import { dropped, useDeviceMessages } from '../helpers/device-messages.js';
import { useService } from '../helpers/service.js';

const MAX = 256;
const tenant = `ige${crypto.randomBytes(3).toString('hex')}`;

describe('through the run broker (MQTT_URL), MAX_MESSAGE_BYTES=256', () => {
  const svc = useService({ MAX_MESSAGE_BYTES: String(MAX) });

  beforeAll(() => {
    expect(svc.service.config.maxMessageBytes).toBe(MAX);
  });
  const { newDevice, send, stored, metrics, droppedAtLeast } = useDeviceMessages(svc, tenant);

  describe('values and the timestamp key', () => {
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
});
