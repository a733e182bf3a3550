// Devices built from the same templates share one schema object (the shard cache's memory).
import { describe, expect, it } from 'vitest';
import { buildDeviceModel } from '../../src/ingest/device-model.js';

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
