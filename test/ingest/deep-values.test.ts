// Values nested deeply (attributes of a type without a rule take any JSON value; docs/messaging.md
// §1 "Validation and conversion"): up to 10,000 levels stored exactly, deeper ones wrong_type, and
// neither holds the shard. Before (found by an audit), JSON.stringify wrote them, whose time grows
// with the square of the depth (~80 ms to fail on a 40 KB value 20,000 levels deep, ~50 ms to
// write one of 12,000): one device sending such messages held every device of its shard, 20 s
// behind 200 of them.
import crypto from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { useService } from '../helpers/service.js';
import { createDevice, createTemplate, deviceClient, eventually, historyCount, metric } from '../helpers/registry-fixtures.js';
import { http } from '../helpers/service.js';

// One worker: every device shares its shard.
const svc = useService({ INGEST_WORKERS: '1' });
const tenant = `dpv${crypto.randomBytes(3).toString('hex')}`;
const nested = (depth: number) => '['.repeat(depth) + ']'.repeat(depth);
const wrongType = async () => metric((await http('GET', `${svc.base}/metrics`)).text, 'ingest_dropped_total{reason="wrong_type"}');

describe('deeply nested values', () => {
  it('10,000 levels are stored exactly, 10,001 are wrong_type, the rest of the message is stored', async () => {
    const pool = svc.service.pool;
    const t = await createTemplate(pool, tenant, 'deep', [
      { label: 'n', type: 'dynamic', value_type: 'integer' },
      { label: 'o', type: 'dynamic', value_type: 'object' },
    ]);
    const id = await createDevice(pool, tenant, [t]);
    const before = await wrongType();
    const c = await deviceClient(svc.env.MQTT_URL!);
    try {
      const deepObject = '{"a":'.repeat(5_000) + '[{"b":[1,-0,"x"]},{"b":{}}]' + '}'.repeat(5_000);
      await c.publishAsync(`${tenant}:${id}/attrs`, `{"n":1,"o":${nested(10_000)}}`, { qos: 1 });
      await c.publishAsync(`${tenant}:${id}/attrs`, `{"n":2,"o":${nested(10_001)}}`, { qos: 1 });
      await c.publishAsync(`${tenant}:${id}/attrs`, `{"n":3,"o":${deepObject}}`, { qos: 1 });
      await eventually(async () => (await historyCount(pool, tenant, id)) >= 5 || undefined, 'stored');
      const { rows } = await pool.query<{ value: string }>(
        "SELECT value FROM history WHERE tenant = $1 AND device_id = $2 AND attr = 'o' ORDER BY ts",
        [tenant, id],
      );
      // (named, not compared as text: a failure would print 20 KB)
      const names = new Map([
        [nested(10_000), '10,000 levels'],
        [deepObject.replace('-0', '0'), 'the deep object'],
        [nested(10_001), '10,001 levels'],
      ]);
      expect(rows.map((r) => names.get(r.value) ?? `${r.value.length} characters`)).toEqual(['10,000 levels', 'the deep object']);
      await eventually(async () => (await wrongType()) >= before + 1 || undefined, 'wrong_type');
    } finally {
      await c.endAsync();
    }
  });

  it('a device sending values too deep to store does not hold the other devices of its shard', async () => {
    const pool = svc.service.pool;
    const t = await createTemplate(pool, tenant, 'deep2', [
      { label: 'n', type: 'dynamic', value_type: 'integer' },
      { label: 'o', type: 'dynamic', value_type: 'object' },
    ]);
    const bad = await createDevice(pool, tenant, [t]);
    const beside = await createDevice(pool, tenant, [t]);
    const c = await deviceClient(svc.env.MQTT_URL!);
    const other = await deviceClient(svc.env.MQTT_URL!);
    try {
      const deep = nested(20_000); // 40 KB, under MAX_MESSAGE_BYTES
      const sent = Array.from({ length: 200 }, (_, i) => c.publishAsync(`${tenant}:${bad}/attrs`, `{"n":${i},"o":${deep}}`, { qos: 1 }));
      await new Promise((r) => setTimeout(r, 300));
      const start = Date.now();
      await other.publishAsync(`${tenant}:${beside}/attrs`, '{"n":1}', { qos: 1 });
      await eventually(async () => (await historyCount(pool, tenant, beside)) === 1 || undefined, 'the device beside it stored', 30_000);
      // Before: 20 to 30 s (behind the 200); now well under a second here. The bound leaves room
      // for a loaded machine (CI runs two files at once) and still tells the two apart.
      expect(Date.now() - start).toBeLessThan(12_000);
      await Promise.all(sent);
      await eventually(async () => (await historyCount(pool, tenant, bad)) === 200 || undefined, "the bad device's n values", 30_000);
    } finally {
      await c.endAsync();
      await other.endAsync();
    }
  }, 90_000);
});
