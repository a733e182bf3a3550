// A device message's payload bytes before the JSON rules of docs/messaging.md §1 ("Validation and
// conversion"): an empty payload is not JSON (not_json), a leading UTF-8 BOM is ignored and the
// JSON after it is read by the usual rules (stored when an object, not_object when not).
import crypto from 'node:crypto';
import { beforeAll, describe, expect, it } from 'vitest';
import { dropped, useDeviceMessages } from '../helpers/device-messages.js';
import { historyCount } from '../helpers/registry-fixtures.js';
import { useService } from '../helpers/service.js';

const MAX = 256;
const tenant = `ige${crypto.randomBytes(3).toString('hex')}`;
const BOM = Buffer.from([0xef, 0xbb, 0xbf]);

describe('through the run broker (MQTT_URL), MAX_MESSAGE_BYTES=256', () => {
  const svc = useService({ MAX_MESSAGE_BYTES: String(MAX) });

  beforeAll(() => {
    expect(svc.service.config.maxMessageBytes).toBe(MAX);
  });
  const { newDevice, send, stored, metrics, droppedAtLeast, settle } = useDeviceMessages(svc, tenant);

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
  });
});
