// The shard actor: rows the database rejects (a constraint added by hand: docs/messaging.md) are
// dropped and the rest of the buffer is committed; the live stream and device status are told of
// what was stored. Before (found by an audit), one rejected row kept the whole buffer's messages
// from them: other devices' stored messages sent no `attrs` message and left their `last_seen`.
import { describe, expect, it } from 'vitest';
import { DeviceCache } from '../../src/ingest/device-cache.js';
import { buildDeviceModel, type AttrRow, type DeviceModel } from '../../src/ingest/device-model.js';
import type { CommittedBatch } from '../../src/ingest/protocol.js';
import { ShardActor } from '../../src/ingest/shard-actor.js';

describe('the shard actor', () => {
  it('tells what was committed without the rows the database rejected', async () => {
    const row = (label: string): AttrRow => ({
      template_id: 1,
      attr_id: 1,
      label,
      type: 'dynamic',
      value_type: 'integer',
      static_value: null,
    });
    const models: Record<string, DeviceModel> = {
      't/one': buildDeviceModel('t', 'one', [row('a'), row('b')]),
      't/two': buildDeviceModel('t', 'two', [row('a')]),
    };
    const cache = new DeviceCache(
      (devices) => Promise.resolve(new Map(devices.map(({ tenant, id }) => [`${tenant}/${id}`, models[`${tenant}/${id}`]!]))),
      10,
      60_000,
    );
    // The database refuses every value 666 (a CHECK constraint).
    const writer = {
      write: (lines: string[]) => {
        const rejectedLines = lines.filter((l) => l.trim().endsWith('\t666'));
        return Promise.resolve({ seconds: 0, rejected: rejectedLines.length, rejectedLines });
      },
    };
    const committed: CommittedBatch[] = [];
    const actor = new ShardActor(cache, writer, { batchRows: 100, onCommitted: (b) => committed.push(b) });
    const payloads = ['{"a":1}', '{"a":666}', '{"a":666,"b":2}', '{"a":3}'].map((p) => Buffer.from(p));
    const offsets = [0];
    for (const p of payloads) offsets.push(offsets.at(-1)! + p.length);
    const delta = await actor.handle({
      keys: ['t/two', 't/two', 't/one', 't/one'].join('\0'),
      payload: Buffer.concat(payloads),
      offsets: Uint32Array.from(offsets),
      received: Float64Array.from([1e6, 2e6, 3e6, 4e6]),
    });
    expect(delta.dropped).toEqual({ db_rejected: 2 });
    const all = committed.flatMap((b) => b.ids.map((id, i) => [id, b.received[i], JSON.parse(b.attrs[i]!) as unknown]));
    expect(all).toEqual([
      ['two', 1e6, { a: 1 }],
      ['one', 3e6, { b: 2 }],
      ['one', 4e6, { a: 3 }],
    ]);
  });
});

describe('the shard actor, with a unique index added by hand', () => {
  it('tells of a stored row whose twin in the same buffer was rejected (a message sent twice)', async () => {
    const row: AttrRow = { template_id: 1, attr_id: 1, label: 'a', type: 'dynamic', value_type: 'integer', static_value: null };
    const model = buildDeviceModel('t', 'one', [row]);
    const cache = new DeviceCache(
      (devices) => Promise.resolve(new Map(devices.map(({ tenant, id }) => [`${tenant}/${id}`, model]))),
      10,
      60_000,
    );
    // The database refuses a row it holds already (UNIQUE (tenant, device_id, attr, ts)): the
    // first of two equal rows is stored, the second rejected.
    const stored = new Set<string>();
    const writer = {
      write: (lines: string[]) => {
        const rejectedLines: string[] = [];
        for (const l of lines) {
          const key = l.split('\t').slice(0, 5).join('\t');
          if (stored.has(key)) rejectedLines.push(l);
          else stored.add(key);
        }
        return Promise.resolve({ seconds: 0, rejected: rejectedLines.length, rejectedLines });
      },
    };
    const committed: CommittedBatch[] = [];
    const actor = new ShardActor(cache, writer, { batchRows: 100, onCommitted: (b) => committed.push(b) });
    // The same message twice (a QoS 1 redelivery), with the device's own timestamp.
    const payloads = ['{"a":5,"timestamp":1000}', '{"a":5,"timestamp":1000}'].map((p) => Buffer.from(p));
    const delta = await actor.handle({
      keys: ['t/one', 't/one'].join('\0'),
      payload: Buffer.concat(payloads),
      offsets: Uint32Array.from([0, payloads[0]!.length, payloads[0]!.length * 2]),
      received: Float64Array.from([1e6, 2e6]),
    });
    expect(delta.dropped).toEqual({ db_rejected: 1 });
    const all = committed.flatMap((b) => b.ids.map((id, i) => [id, b.received[i], JSON.parse(b.attrs[i]!) as unknown]));
    expect(all).toEqual([['one', 1e6, { a: 5 }]]);
  });
});

describe('the shard actor, when the live stream cannot take a commit', () => {
  it('still answers for the stored messages (their acknowledgements do not wait on the stream)', async () => {
    const models: Record<string, DeviceModel> = {
      't/one': buildDeviceModel('t', 'one', [
        { template_id: 1, attr_id: 1, label: 'a', type: 'dynamic', value_type: 'integer', static_value: null },
      ]),
    };
    const cache = new DeviceCache(
      (devices) => Promise.resolve(new Map(devices.map(({ tenant, id }) => [`${tenant}/${id}`, models[`${tenant}/${id}`]!]))),
      10,
      60_000,
    );
    let stored = 0;
    const writer = {
      write: (lines: string[]) => {
        stored += lines.length;
        return Promise.resolve({ seconds: 0, rejected: 0, rejectedLines: [] });
      },
    };
    const actor = new ShardActor(cache, writer, {
      batchRows: 100,
      onCommitted: () => {
        throw new Error('the stream failed');
      },
    });
    const payload = Buffer.from('{"a":1}');
    // Before, the error escaped the COPY's turn and the buffer's waiters were never answered: this never settled.
    const delta = await Promise.race([
      actor.handle({ keys: 't/one', payload, offsets: Uint32Array.from([0, payload.length]), received: Float64Array.from([1e6]) }),
      new Promise<'stalled'>((r) => setTimeout(() => r('stalled'), 2000)),
    ]);
    expect(delta).not.toBe('stalled');
    expect(stored).toBe(1);
  });
});

describe('the shard actor, with a large COPY whose rows are all rejected', () => {
  it('still answers (INGEST_BATCH_ROWS up to 1,000,000: the rejected rows are gathered without a spread)', async () => {
    const model = buildDeviceModel('t', 'one', [
      { template_id: 1, attr_id: 1, label: 'a', type: 'dynamic', value_type: 'integer', static_value: null },
    ]);
    const cache = new DeviceCache(
      (devices) => Promise.resolve(new Map(devices.map(({ tenant, id }) => [`${tenant}/${id}`, model]))),
      10,
      60_000,
    );
    // A constraint added by hand refuses every row of the COPY.
    const writer = {
      write: (lines: string[]) => Promise.resolve({ seconds: 0, rejected: lines.length, rejectedLines: [...lines] }),
    };
    const actor = new ShardActor(cache, writer, { batchRows: 1_000_000 });
    const n = 300_000;
    const one = Buffer.from('{"a":1}');
    const offsets = Uint32Array.from({ length: n + 1 }, (_, i) => i * one.length);
    // Before, `push(...refused)` of 300,000 rows threw "Maximum call stack size exceeded" out of
    // the flush: the handle never settled.
    const delta = await Promise.race([
      actor.handle({
        keys: Array.from({ length: n }, () => 't/one').join('\0'),
        payload: Buffer.concat(Array.from({ length: n }, () => one)),
        offsets,
        received: Float64Array.from({ length: n }, (_, i) => 1e6 + i),
      }),
      new Promise<'stalled'>((r) => setTimeout(() => r('stalled'), 20_000)),
    ]);
    expect(delta).not.toBe('stalled');
    expect((delta as { dropped: Record<string, number> }).dropped).toEqual({ db_rejected: n });
  }, 60_000);
});
