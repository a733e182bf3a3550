// Pure logic of the messaging path: topics, sharding, the pinning load balancer, value rules,
// timestamps, translators and COPY rendering.
import { describe, expect, it } from 'vitest';
import { configTopics, parseDeviceName, parseDeviceTopic } from '../../src/broker/topics.js';
import { shardFor } from '../../src/ingest/shard.js';
import { pinnedBalancer } from '../../src/ingest/shard-pool.js';
import { queueOptionsSymbol } from 'piscina';
import { converterFor } from '../../src/ingest/values.js';
import { microsToText, parseTimestamp } from '../../src/time.js';
import { buildDeviceModel, copyEscape, parseTranslator, renderMessage, type AttrRow } from '../../src/ingest/device-model.js';
import { historyQueryOf } from '../../src/history/query.js';
import { seriesKey } from '../../src/history/series.js';
import { compileQueries } from '../../src/schemas/validator.js';
import { DeviceCache } from '../../src/ingest/device-cache.js';
import type { DeviceModel } from '../../src/ingest/device-model.js';
import { ShardActor } from '../../src/ingest/shard-actor.js';
import type { HistoryWriter } from '../../src/ingest/history-writer.js';

describe('topics', () => {
  it.each([
    ['acme:4f2a1c/attrs', { tenant: 'acme', id: '4f2a1c', kind: 'attrs', legacy: false }],
    ['acme:4f2a1c/config', { tenant: 'acme', id: '4f2a1c', kind: 'config', legacy: false }],
    ['/acme/4f2a1c/attrs', { tenant: 'acme', id: '4f2a1c', kind: 'attrs', legacy: true }],
    ['/acme/4f2a1c/config', { tenant: 'acme', id: '4f2a1c', kind: 'config', legacy: true }],
    ['a:b:c/attrs', { tenant: 'a:b', id: 'c', kind: 'attrs', legacy: false }],
  ])('%s', (topic, expected) => {
    expect(parseDeviceTopic(topic)).toEqual(expected);
  });

  it.each(['acme/4f2a1c/attrs', 'acme:4f2a1c', 'acme:4f2a1c/other', ':x/attrs', 'acme:/attrs', '/acme/attrs', '/acme/x/y/attrs', 'acme:+/attrs', '//x/attrs', 'a:b/attrs/x'])(
    'not a device topic: %s',
    (topic) => {
      expect(parseDeviceTopic(topic)).toBeUndefined();
    },
  );

  it('device names and config topics', () => {
    expect(parseDeviceName('t1:abc')).toEqual({ tenant: 't1', id: 'abc' });
    expect(parseDeviceName('abc')).toBeUndefined();
    expect(parseDeviceName('t1:')).toBeUndefined();
    expect(configTopics('t1', 'abc')).toEqual(['t1:abc/config', '/t1/abc/config']);
  });
});

describe('sharding', () => {
  it('is stable and spreads devices over the shards', () => {
    expect(shardFor('t/abc123', 4)).toBe(shardFor('t/abc123', 4));
    const counts = [0, 0, 0, 0];
    for (let i = 0; i < 10_000; i++) counts[shardFor(`tenant/${i.toString(16).padStart(6, '0')}`, 4)]!++;
    for (const c of counts) expect(c).toBeGreaterThan(2000);
  });
});

describe('the pinning load balancer', () => {
  const worker = (id: number, destroyed = false) => ({ id, destroyed, terminating: false, currentUsage: 0, isRunningAbortableTask: false, histogram: null });
  const task = (shard: number) => ({ [queueOptionsSymbol]: { shard }, taskId: 0, filename: '', name: '', created: 0, isAbortable: false }) as never;

  it('gives every shard one owner, spread evenly, and keeps it whatever the load', () => {
    const owners = new Map<number, number>();
    const balance = pinnedBalancer(owners);
    const workers = [worker(7), worker(3)] as never[];
    const picked = [0, 1, 2, 3].map((s) => (balance(task(s), workers) as { id: number }).id);
    expect(new Set(picked).size).toBe(2);
    expect(picked.filter((id) => id === 3)).toHaveLength(2);
    for (let round = 0; round < 3; round++) {
      expect([0, 1, 2, 3].map((s) => (balance(task(s), workers) as { id: number }).id)).toEqual(picked);
    }
  });

  it('waits (null) while the owner is not offered, and reassigns once the owner is gone', () => {
    const owners = new Map<number, number>([[0, 5]]);
    const balance = pinnedBalancer(owners);
    expect(balance(task(0), [worker(6)] as never[])).toBeNull();
    owners.delete(0); // what the pool does when worker 5 is destroyed
    expect((balance(task(0), [worker(6)] as never[]) as { id: number }).id).toBe(6);
  });
});

describe('value rules', () => {
  it.each([
    ['float', 1.5, '1.5'],
    ['float', '2.25', '2.25'],
    ['float', ' 3 ', '3'],
    ['float', '1e3', '1000'],
    ['float', 'abc', undefined],
    ['float', '', undefined],
    ['float', true, undefined],
    ['float', null, undefined],
    ['integer', 4, '4'],
    ['integer', '5', '5'],
    ['integer', 4.5, undefined],
    ['integer', '4.5', undefined],
    ['bool', true, 'true'],
    ['bool', 'true', undefined],
    ['bool', 0, undefined],
    ['string', 'x"y', '"x\\"y"'],
    ['string', 5, undefined],
    ['geopoint', '-22.8,-47.1', '"-22.8,-47.1"'],
    ['geopoint', '95,0', undefined],
    ['geopoint', '0,181', undefined],
    ['geopoint', '1;2', undefined],
    ['object', { a: [1] }, '{"a":[1]}'],
    ['psk', 'anything', '"anything"'],
    ['whatever', null, 'null'],
  ])('%s %j -> %s', (type, value, expected) => {
    expect(converterFor(type)(value)).toBe(expected);
  });

  it('timestamps: epoch ms, ISO 8601 with or without zone and fraction, nothing else', () => {
    expect(parseTimestamp(1714564800000)).toBe(1714564800000 * 1000);
    expect(parseTimestamp('1714564800000')).toBe(1714564800000 * 1000);
    expect(parseTimestamp('2024-05-01T12:00:00Z')).toBe(Date.UTC(2024, 4, 1, 12) * 1000);
    expect(parseTimestamp('2024-05-01T12:00:00')).toBe(Date.UTC(2024, 4, 1, 12) * 1000);
    expect(parseTimestamp('2024-05-01T14:00:00.000123+02:00')).toBe(Date.UTC(2024, 4, 1, 12) * 1000 + 123);
    expect(parseTimestamp('2024-05-01')).toBe(Date.UTC(2024, 4, 1) * 1000);
    for (const bad of ['2024-02-30T00:00:00Z', '2024-05-01T25:00:00Z', 'now', -1, Infinity, true, '2024-05-01T12:00:00+25:00', 1e20]) {
      expect(parseTimestamp(bad)).toBeUndefined();
    }
    expect(microsToText(Date.UTC(2024, 0, 2, 3, 4, 5, 678) * 1000 + 9)).toBe('2024-01-02T03:04:05.678009Z');
  });
});

describe('device model and rendering', () => {
  const row = (label: string, type: string, value_type = 'float', static_value: string | null = null, id = 1): AttrRow => ({
    template_id: 1, attr_id: id, label, type, value_type, static_value,
  });
  const ts = (us: number) => microsToText(us);

  it('renders COPY rows for dynamic and actuator attributes, escaping text', () => {
    const model = buildDeviceModel('t\\1', 'd1', [row('a', 'dynamic', 'string'), row('b', 'actuator', 'integer'), row('s', 'static', 'string', 'x')]);
    const out: string[] = [];
    const o = renderMessage(model, JSON.stringify({ a: 'x\\y\nz', b: 2, s: 'no', zz: 1 }), 1_000_000, ts, out);
    expect(out).toEqual([
      `t\\\\1\td1\ta\t${seriesKey('t\\1', 'd1', 'a')}\t1970-01-01T00:00:01.000000Z\t"x\\\\\\\\y\\\\nz"\n`,
      `t\\\\1\td1\tb\t${seriesKey('t\\1', 'd1', 'b')}\t1970-01-01T00:00:01.000000Z\t2\n`,
    ]);
    expect(o).toMatchObject({ values: 4, unknownKeys: 2, wrongTypes: 0 });
    expect(copyEscape('a\tb\r')).toBe('a\\tb\\r');
  });

  it('translators: one RFC 6902 operation each, optional ones may fail, bad ones are ignored', () => {
    expect(parseTranslator('{"op":"move","from":"/a","path":"/b","optional":true}')).toEqual({ op: { op: 'move', from: '/a', path: '/b' }, optional: true });
    expect(parseTranslator('not json')).toMatch(/not JSON/);
    expect(parseTranslator('{"op":"explode","path":"/a"}')).toMatch(/not a JSON Patch operation/);
    expect(parseTranslator('{"op":"add","path":"/__proto__/x","value":1}')).toMatch(/__proto__/);
    expect(parseTranslator('{"op":"move","from":"/constructor/prototype","path":"/a"}')).toMatch(/prototype/);
    expect(parseTranslator('{"op":"move","from":"/prototype","path":"/a"}')).toEqual({ op: { op: 'move', from: '/prototype', path: '/a' }, optional: false });
    const warnings: string[] = [];
    const model = buildDeviceModel('t', 'd', [
      row('tag_a', 'dynamic'),
      row('t1', 'meta-translator', 'string', '{"op":"move","from":"/a","path":"/tag_a"}'),
      row('t2', 'meta-translator', 'string', 'broken'),
    ], (label) => warnings.push(label));
    expect(warnings).toEqual(['t2']);
    const out: string[] = [];
    expect(renderMessage(model, '{"a":1}', 0, ts, out).dropped).toBeUndefined();
    expect(out).toHaveLength(1);
    expect(renderMessage(model, '{"b":1}', 0, ts, []).dropped).toBe('translation_failed');
    expect(renderMessage(model, '{"__proto__":{"x":1},"a":1}', 0, ts, []).dropped).toBeUndefined();
    expect(({} as Record<string, unknown>).x).toBeUndefined();
  });

  it('message-level drops; an unreadable timestamp is not one (receive time)', () => {
    const model = buildDeviceModel('t', 'd', [row('a', 'dynamic')]);
    expect(renderMessage(model, '{', 0, ts, []).dropped).toBe('not_json');
    expect(renderMessage(model, '[1]', 0, ts, []).dropped).toBe('not_object');
    const rows: string[] = [];
    const o = renderMessage(model, '{"a":1,"timestamp":"soon"}', 7_000_000, ts, rows);
    expect([o.dropped, o.badTimestamp, o.us]).toEqual([undefined, true, 7_000_000]);
    expect(rows).toHaveLength(1);
    expect(rows[0]).toContain('\t1970-01-01T00:00:07.000000Z\t');
  });
});

describe('history query parsing', () => {
  // As the route gets it: checked and typed by the `history.query` schema, then turned into the query.
  const check = compileQueries({ maxPageSize: 1000, maxDeviceCount: 10000, historyMaxResults: 100 }).get('history.query')!;
  const q = (s: string) => historyQueryOf(check.run(new URLSearchParams(s)).values, 100);
  it('modes and limits', () => {
    expect(q('attr=a')).toMatchObject({ attrs: ['a'], single: true, order: 'desc', limit: 100 });
    expect(q('attr=a,b&attr=c&attr=a')).toMatchObject({ attrs: ['a', 'b', 'c'], single: false });
    expect(q('')).toMatchObject({ attrs: undefined, single: false });
    expect(q('lastN=5&firstN=2')).toMatchObject({ order: 'asc', limit: 2 });
    expect(q('lastN=0')).toMatchObject({ order: 'desc', limit: 100 });
    expect(q('dateFrom=2024-05-01T00:00:00Z').from).toBe('2024-05-01T00:00:00.000000Z');
  });
});

describe('the shard device cache', () => {
  const model = (tenant: string, id: string, templateIds: number[]) => ({ ...buildDeviceModel(tenant, id, []), templateIds }) as DeviceModel;

  it('loads misses in one batch, caches absent devices, and drops entries on registry events', async () => {
    const registry = new Map<string, DeviceModel>([['t/a', model('t', 'a', [1])]]);
    const loads: string[][] = [];
    const cache = new DeviceCache(async (devices) => {
      loads.push(devices.map((d) => d.id));
      return new Map(devices.filter((d) => registry.has(`${d.tenant}/${d.id}`)).map((d) => [`${d.tenant}/${d.id}`, registry.get(`${d.tenant}/${d.id}`)!]));
    }, 100);
    let get = await cache.resolve(['t/a', 't/b', 't/a']);
    expect([get(0)?.id, get(1), get(2)?.id]).toEqual(['a', null, 'a']);
    expect(loads).toEqual([['a', 'b']]);
    get = await cache.resolve(['t/a', 't/b']);
    expect(loads).toHaveLength(1); // both cached, b as absent
    registry.set('t/b', model('t', 'b', [2]));
    cache.invalidate({ type: 'devices.changed', tenant: 't', deviceIds: ['b'] });
    get = await cache.resolve(['t/b']);
    expect(get(0)?.id).toBe('b');
    cache.invalidate({ type: 'templates.changed', tenant: 't', templateIds: [1] });
    await cache.resolve(['t/a', 't/b']);
    expect(loads.at(-1)).toEqual(['a']);
    cache.invalidate({ type: 'tenant.changed', tenant: '*' });
    await cache.resolve(['t/b']);
    expect(loads.at(-1)).toEqual(['b']);
  });

  it('a load that was running when an event arrived is used once but not cached', async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    let calls = 0;
    const cache = new DeviceCache(async () => {
      calls++;
      if (calls === 1) await gate;
      return new Map();
    }, 100);
    const pending = cache.resolve(['t/x']);
    cache.invalidate({ type: 'devices.changed', tenant: 't', deviceIds: ['x'] });
    release();
    expect((await pending)(0)).toBeNull();
    await cache.resolve(['t/x']);
    expect(calls).toBe(2);
  });
});

describe('the router', () => {
  const quiet = { debug() {}, info() {}, warn() {}, error() {}, child() { return quiet; }, level: 'silent' as const };
  const acker = () => {
    const acked: number[] = [];
    return { acked, handle: (t: number) => ({ ack: () => acked.push(t) }) };
  };

  it('batches per shard, acknowledges only once the shard reports the batch committed, and sends a failed batch again', async () => {
    const { IngestRouter } = await import('../../src/ingest/router.js');
    const calls: Array<{ shard: number; keys: string[]; resolve: () => void; reject: (e: Error) => void }> = [];
    const runner = {
      shards: 2,
      run: (shard: number, task: { keys: string }) =>
        new Promise<any>((resolve, reject) => calls.push({ shard, keys: task.keys.split('\0'), resolve: () => resolve(ShardActorMetrics()), reject })),
    };
    const router = new IngestRouter(runner as never, { maxMessageBytes: 100, maxPending: 1000, holdMs: 10, log: quiet, onPressure() {} });
    const a = acker();
    router.accept('t', 'dev1', Buffer.from('{}'), a.handle(1));
    router.accept('t', 'dev1', Buffer.from('{}'), a.handle(2));
    router.accept('t', 'dev1', Buffer.from('x'.repeat(101)), a.handle(3)); // oversized: dropped and acked at once
    expect(a.acked).toEqual([3]);
    await eventuallyTrue(() => calls.length === 1);
    expect(calls[0]!.keys).toEqual(['t/dev1', 't/dev1']);
    calls[0]!.reject(new Error('worker died'));
    await eventuallyTrue(() => calls.length === 2);
    expect(a.acked).toEqual([3]);
    expect(calls[1]!.keys).toEqual(['t/dev1', 't/dev1']);
    calls[1]!.resolve();
    await eventuallyTrue(() => a.acked.length === 3);
    expect(a.acked).toEqual([3, 1, 2]);
    expect(router.unacknowledged).toBe(0);
  });

  it('asks the broker link to pause above INGEST_MAX_PENDING and to resume below half of it', async () => {
    const { IngestRouter } = await import('../../src/ingest/router.js');
    const pending: Array<() => void> = [];
    const runner = { shards: 1, run: () => new Promise<any>((resolve) => pending.push(() => resolve(ShardActorMetrics()))) };
    const pressure: boolean[] = [];
    const router = new IngestRouter(runner as never, { maxMessageBytes: 100, maxPending: 4, holdMs: 10, log: quiet, onPressure: (p) => pressure.push(p) });
    const a = acker();
    for (let i = 0; i < 4; i++) router.accept('t', 'd', Buffer.from('{}'), a.handle(i));
    expect(pressure).toEqual([true]);
    const drained = router.drain();
    await eventuallyTrue(() => pending.length === 1);
    pending[0]!();
    await drained;
    expect(pressure).toEqual([true, false]);
  });
});

function ShardActorMetrics() {
  return { messagesStored: 0, valuesReceived: 0, valuesStored: 0, dropped: {}, cacheHits: 0, cacheMisses: 0, batchRows: [], copySeconds: [], cachedDevices: 0 };
}

async function eventuallyTrue(cond: () => boolean): Promise<void> {
  for (let i = 0; i < 200 && !cond(); i++) await new Promise((r) => setTimeout(r, 5));
  expect(cond()).toBe(true);
}

describe('device schemas', () => {
  it('devices with the same attributes share one schema; a different translator override makes another', async () => {
    const { SchemaPool } = await import('../../src/ingest/device-model.js');
    const pool = new SchemaPool();
    const rows = (override: string) => [
      { template_id: 1, attr_id: 1, label: 'a', type: 'dynamic', value_type: 'float', static_value: null },
      { template_id: 1, attr_id: 2, label: 'tr', type: 'meta-translator', value_type: 'string', static_value: override },
    ];
    const a = buildDeviceModel('t', 'a', rows('{"op":"move","from":"/x","path":"/a"}'), undefined, pool);
    const b = buildDeviceModel('t', 'b', rows('{"op":"move","from":"/x","path":"/a"}'), undefined, pool);
    const c = buildDeviceModel('t', 'c', rows('{"op":"move","from":"/y","path":"/a"}'), undefined, pool);
    expect(a.stored).toBe(b.stored);
    expect(a.translators).toBe(b.translators);
    expect(c.translators).not.toBe(a.translators);
    expect([a.prefix, b.prefix]).toEqual(['t\ta\t', 't\tb\t']);
    expect(pool.size).toBe(2);
  });
});

describe('the shard actor', () => {
  it('drops a message whose processing throws (counted unprocessable) and commits the rest of the batch', async () => {
    const row = (label: string): AttrRow => ({ template_id: 1, attr_id: 1, label, type: 'dynamic', value_type: 'float', static_value: null });
    const good = buildDeviceModel('t', 'good', [row('a')]);
    const bad = buildDeviceModel('t', 'bad', [row('a')]);
    // No input is known to make rendering throw: stand in for one with a converter that does.
    bad.stored.set('a', { ...bad.stored.get('a')!, convert: () => { throw new Error('unforeseen'); } });
    const models: Record<string, DeviceModel> = { 't/good': good, 't/bad': bad };
    const cache = new DeviceCache(async (devices) => new Map(devices.map(({ tenant, id }) => [`${tenant}/${id}`, models[`${tenant}/${id}`]!])), 10);
    const written: string[] = [];
    const writer = {
      write: async (lines: string[]) => {
        written.push(...lines);
        return { seconds: 0, rejected: 0 };
      },
    };
    const actor = new ShardActor(cache, writer as unknown as HistoryWriter, { batchRows: 100, batchMs: 1 });
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
  });
});
