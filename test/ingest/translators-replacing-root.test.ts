// Translators (`meta-translator` attributes) that replace the whole message (docs/messaging.md §1
// "Validation and conversion"): when the result is not an object (a number, an array, null, a
// string, nothing) the message is dropped as not_object, not translation_failed; when it is an
// object, its values are stored like those of any message.
import crypto from 'node:crypto';
import { beforeAll, describe, expect, it } from 'vitest';
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
  const { newDevice, send, stored, metrics, droppedAtLeast, settle } = useDeviceMessages(svc, tenant);

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
