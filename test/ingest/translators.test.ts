// Translators (`meta-translator` attributes, src/ingest/translate.ts): the same results as
// fast-json-patch for every operation, applicable or not, and the two guards that keep one
// message from stalling its shard: an operation that cannot apply is found without building
// fast-json-patch's error (which holds the whole message, pretty-printed: a 32 KB message 8,000
// levels deep held its shard for 22 s), and a message grows through its translators to
// TRANSLATED_MAX_BYTES at most (copies of the root double it each time: 30 took a worker past
// 3.9 GB). Through a service: both kinds of message, and the devices beside them, acknowledged.
import crypto from 'node:crypto';
import jsonPatch, { type Operation } from 'fast-json-patch';
import { describe, expect, it } from 'vitest';
import { applyTranslators, TRANSLATED_MAX_BYTES, type Translator } from '../../src/ingest/translate.js';
import { createDevice, createTemplate, deviceClient, eventually, historyCount } from '../helpers/registry-fixtures.js';
import { useService } from '../helpers/service.js';

/** What fast-json-patch makes of it (validating, as ingest applies it): the new document, or 'failed'. */
function library(doc: unknown, op: Operation): unknown {
  try {
    return jsonPatch.applyOperation(structuredClone(doc), op, true, true, true).newDocument;
  } catch {
    return 'failed';
  }
}

const DOC = { a: 1, b: { c: [1, 2, { d: 'x' }], 'e/f': true, 'g~h': null }, list: [] as unknown[] };

const OPS: Operation[] = [
  { op: 'add', path: '/z', value: 5 },
  { op: 'add', path: '/b/c/1', value: 'in' },
  { op: 'add', path: '/b/c/3', value: 'end' },
  { op: 'add', path: '/b/c/4', value: 'past' },
  { op: 'add', path: '/b/c/-', value: 'dash' },
  { op: 'add', path: '/missing/x', value: 1 },
  { op: 'add', path: '/a/x', value: 1 },
  { op: 'add', path: '', value: { whole: 1 } },
  { op: 'remove', path: '/a' },
  { op: 'remove', path: '/nope' },
  { op: 'remove', path: '/b/c/2/d' },
  { op: 'remove', path: '/b/c/7' },
  { op: 'remove', path: '/b/e~1f' },
  { op: 'replace', path: '/b/g~0h', value: 2 },
  { op: 'replace', path: '/b/gh', value: 2 },
  { op: 'replace', path: '/list/0', value: 2 },
  { op: 'move', from: '/a', path: '/moved' },
  { op: 'move', from: '/x', path: '/moved' },
  { op: 'move', from: '/b', path: '/b/c/inner' },
  { op: 'move', from: '/b/c', path: '/b/c2' },
  { op: 'copy', from: '/b/c/2', path: '/copied' },
  { op: 'copy', from: '', path: '/self' },
  { op: 'copy', from: '/nope', path: '/x' },
  { op: 'test', path: '/b/c/2', value: { d: 'x' } },
  { op: 'test', path: '/b/c/2', value: { d: 'y' } },
  { op: 'test', path: '/nope', value: 1 },
  { op: 'test', path: '/a', value: 1 },
];

describe('applyTranslators', () => {
  it.each(OPS.map((op) => [JSON.stringify(op), op] as const))('%s: as fast-json-patch applies it', (_name, op) => {
    const expected = library(DOC, op);
    const required = applyTranslators(structuredClone(DOC), [{ op, optional: false }], 100);
    const optional = applyTranslators(structuredClone(DOC), [{ op, optional: true }], 100);
    if (expected === 'failed') {
      expect(required).toBeUndefined();
      expect(optional).toEqual(DOC);
    } else {
      expect(required).toEqual(expected);
      expect(optional).toEqual(expected);
    }
  });

  it('a failing operation on a deeply nested message does not build the library’s error', () => {
    let deep: unknown = 1;
    for (let i = 0; i < 8000; i++) deep = [deep];
    const doc = { blob: deep };
    const stringify = JSON.stringify;
    let texts = 0;
    JSON.stringify = ((...args: Parameters<typeof stringify>) => {
      texts++;
      return stringify(...args);
    }) as typeof JSON.stringify;
    try {
      const out = applyTranslators(doc, [{ op: { op: 'move', from: '/x', path: '/n' }, optional: true }], 32_000);
      expect(out).toBe(doc);
    } finally {
      JSON.stringify = stringify;
    }
    expect(texts).toBe(0);
  });

  it(`copies stop at ${TRANSLATED_MAX_BYTES} bytes of document: optional ones are skipped, a required one drops the message`, () => {
    const copies: Translator[] = Array.from({ length: 30 }, (_, i) => ({ op: { op: 'copy', from: '', path: `/c${i}` }, optional: true }));
    const out = applyTranslators({ v: 1 }, copies, 7);
    const size = JSON.stringify(out).length;
    expect(size).toBeLessThanOrEqual(TRANSLATED_MAX_BYTES);
    expect(size).toBeGreaterThan(TRANSLATED_MAX_BYTES / 4); // it did copy while there was room
    const required = copies.map((t) => ({ ...t, optional: false }));
    expect(applyTranslators({ v: 1 }, required, 7)).toBeUndefined();
  });
});

describe('through a service: a message that would stall its shard', () => {
  const svc = useService({ MQTT_URL: undefined, INGEST_WORKERS: '1' });

  it('a deeply nested message for a device with a failing translator, and one that copies itself, are acknowledged, and so is the device beside them', async () => {
    const tenant = `tr${crypto.randomBytes(3).toString('hex')}`;
    const pool = svc.service.pool;
    const t = await createTemplate(pool, tenant, 'tr', [
      { label: 'blob', type: 'dynamic', value_type: 'object' },
      { label: 'v', type: 'dynamic', value_type: 'integer' },
      {
        label: 'tr',
        type: 'meta-translator',
        value_type: 'string',
        static_value: JSON.stringify({ op: 'move', from: '/x', path: '/n', optional: true }),
      },
      ...Array.from({ length: 30 }, (_, i) => ({
        label: `cp${i}`,
        type: 'meta-translator',
        value_type: 'string',
        static_value: JSON.stringify({ op: 'copy', from: '', path: `/c${i}`, optional: true }),
      })),
    ]);
    const plain = await createTemplate(pool, tenant, 'plain', [{ label: 'v', type: 'dynamic', value_type: 'integer' }]);
    const translated = await createDevice(pool, tenant, [t]);
    const beside = await createDevice(pool, tenant, [plain]);
    const url = `mqtt://127.0.0.1:${svc.service.mqttPort}`;
    const c = await deviceClient(url);
    const other = await deviceClient(url);
    try {
      const deep = '['.repeat(8000) + '1' + ']'.repeat(8000);
      await c.publishAsync(`/${tenant}/${translated}/attrs`, `{"blob":${deep},"v":1}`, { qos: 1 });
      await c.publishAsync(`/${tenant}/${translated}/attrs`, JSON.stringify({ v: 2 }), { qos: 1 });
      await other.publishAsync(`/${tenant}/${beside}/attrs`, JSON.stringify({ v: 3 }), { qos: 1 });
      // (a deadline for a hang, not a timing assertion: before, the first message alone held the shard for 22 s)
      await eventually(
        async () => ((await historyCount(pool, tenant, beside)) === 1 ? true : undefined),
        'the device beside them stored',
        10_000,
      );
      expect(await historyCount(pool, tenant, translated)).toBe(3); // blob and v, then v
    } finally {
      await c.endAsync();
      await other.endAsync();
    }
  }, 60_000);
});
