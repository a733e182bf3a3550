// The shard actor: a message whose processing throws is dropped alone (logged with its tenant and
// device); the rest of its batch is committed.
import { describe, expect, it } from 'vitest';
import { createLogger } from '../../src/log.js';
import { DeviceCache } from '../../src/ingest/device-cache.js';
import { buildDeviceModel, type AttrRow, type DeviceModel } from '../../src/ingest/device-model.js';
import { ShardActor } from '../../src/ingest/shard-actor.js';

describe('the shard actor', () => {
  it('drops a message whose processing throws (counted unprocessable) and commits the rest of the batch', async () => {
    const row = (label: string): AttrRow => ({
      template_id: 1,
      attr_id: 1,
      label,
      type: 'dynamic',
      value_type: 'float',
      static_value: null,
    });
    const good = buildDeviceModel('t', 'good', [row('a')]);
    const bad = buildDeviceModel('t', 'bad', [row('a')]);
    // No input is known to make rendering throw: stand in for one with a converter that does.
    bad.stored.set('a', {
      ...bad.stored.get('a')!,
      convert: () => {
        throw new Error('unforeseen');
      },
    });
    const models: Record<string, DeviceModel> = { 't/good': good, 't/bad': bad };
    const cache = new DeviceCache(
      (devices) => Promise.resolve(new Map(devices.map(({ tenant, id }) => [`${tenant}/${id}`, models[`${tenant}/${id}`]!]))),
      10,
      60_000,
    );
    const written: string[] = [];
    const writer = {
      write: (lines: string[]) => {
        written.push(...lines);
        return Promise.resolve({ seconds: 0, rejected: 0, rejectedLines: [] });
      },
    };
    const lines: string[] = [];
    const log = createLogger('info', { component: 'ingest-shard' }, { write: (line) => lines.push(line) });
    const actor = new ShardActor(cache, writer, { batchRows: 100, log });
    const payloads = ['{"a":1}', '{"a":2}', '{"a":3}'].map((p) => Buffer.from(p));
    const delta = await actor.handle({
      keys: ['t/good', 't/bad', 't/good'].join('\0'),
      payload: Buffer.concat(payloads),
      offsets: Uint32Array.from([0, 7, 14, 21]),
      received: Float64Array.from([1e6, 2e6, 3e6]),
    });
    expect(written.map((l) => l.split('\t')[1] + '=' + l.trim().split('\t').at(-1))).toEqual(['good=1', 'good=3']);
    expect(delta.dropped).toEqual({ unprocessable: 1 });
    expect(delta.messagesStored).toBe(2);
    expect(lines.map((l) => JSON.parse(l) as unknown)).toEqual([
      expect.objectContaining({
        level: 'error',
        msg: 'a message could not be processed; dropped',
        component: 'ingest-shard',
        tenant: 't',
        device: 'bad',
        error: 'unforeseen',
      }),
    ]);
  });
});
