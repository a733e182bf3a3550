// Values against their attribute's value_type through the service (docs/messaging.md §1
// "Validation and conversion"): a geopoint with blanks around its numbers fits and is stored as
// given, one whose blanks split a number does not (wrong_type); a number beyond a double (1e400)
// in a value of a type without a rule is wrong_type rather than stored as null.
import crypto from 'node:crypto';
import { beforeAll, describe, expect, it } from 'vitest';
import type { HistoryRecord } from '../helpers/api.js';
import { dropped, useDeviceMessages } from '../helpers/device-messages.js';
import { historyCount } from '../helpers/registry-fixtures.js';
import { useService } from '../helpers/service.js';

const MAX = 256;
const tenant = `ige${crypto.randomBytes(3).toString('hex')}`;

describe('through the run broker (MQTT_URL), MAX_MESSAGE_BYTES=256', () => {
  const svc = useService({ MAX_MESSAGE_BYTES: String(MAX) });

  beforeAll(() => {
    expect(svc.service.config.maxMessageBytes).toBe(MAX);
  });
  const { newDevice, send, history, stored, metrics, droppedAtLeast, settle } = useDeviceMessages(svc, tenant);

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
  });
});
