// Point 8 of issue 19 through the running service: a row PostgreSQL refuses for a lasting reason
// (a CHECK constraint added by hand) is dropped and counted, the rest of the message is stored,
// and the message counters say what was stored: ingest_messages_stored_total counts the messages
// with at least one value committed (docs/messaging.md §4), so a message whose every value was
// refused is not one. Before (found by an audit), it was counted as stored all the same.
import crypto from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { http, startTestService, type TestService } from '../helpers/service.js';
import { createDevice, createTemplate, deviceClient, eventually, metric } from '../helpers/registry-fixtures.js';

describe('history rows the database rejects', () => {
  let svc: TestService;
  const tenant = `dr${crypto.randomBytes(3).toString('hex')}`;
  let device: string;

  beforeAll(async () => {
    svc = await startTestService({ INGEST_WORKERS: '1' });
    const t = await createTemplate(svc.service.pool, tenant, 't', [
      { label: 'n', type: 'dynamic', value_type: 'integer' },
      { label: 'm', type: 'dynamic', value_type: 'integer' },
    ]);
    device = await createDevice(svc.service.pool, tenant, [t]);
    await svc.service.pool.query(`ALTER TABLE history ADD CONSTRAINT audit_no_666 CHECK (value <> '666')`);
  });
  afterAll(() => svc?.stop());

  it('are counted as db_rejected, and a message left with no stored value is not counted as stored', async () => {
    const client = await deviceClient(svc.env.MQTT_URL!);
    const topic = `${tenant}:${device}/attrs`;
    const db = new pg.Pool({ connectionString: svc.env.DATABASE_URL, max: 1 });
    try {
      const before = (await http('GET', `${svc.base}/metrics`)).text;
      const base = (name: string) => metric(before, name);
      // Each published (and acknowledged) on its own, so each goes in a COPY of its own.
      await client.publishAsync(topic, JSON.stringify({ n: 666 }), { qos: 1 }); // every value refused
      await client.publishAsync(topic, JSON.stringify({ n: 666, m: 1 }), { qos: 1 }); // one of two refused
      await client.publishAsync(topic, JSON.stringify({ n: 2 }), { qos: 1 }); // stored whole

      const text = await eventually(async () => {
        const t = (await http('GET', `${svc.base}/metrics`)).text;
        return metric(t, 'ingest_messages_acknowledged_total') - base('ingest_messages_acknowledged_total') >= 3 &&
          metric(t, 'ingest_values_stored_total') - base('ingest_values_stored_total') >= 2
          ? t
          : undefined;
      }, 'the three messages in the metrics');
      const delta = (name: string) => metric(text, name) - base(name);

      const { rows } = await db.query<{ attr: string; value: string }>(
        'SELECT attr, value FROM history WHERE tenant = $1 AND device_id = $2 ORDER BY ts',
        [tenant, device],
      );
      expect(rows).toEqual([
        { attr: 'm', value: '1' },
        { attr: 'n', value: '2' },
      ]);
      expect(delta('ingest_messages_received_total')).toBe(3);
      expect(delta('ingest_values_received_total')).toBe(4);
      expect(delta('ingest_values_stored_total')).toBe(2);
      expect(delta('ingest_dropped_total{reason="db_rejected"}')).toBe(2);
      // Two messages have a value in history; before, 3 (the one whose only value was refused too).
      expect(delta('ingest_messages_stored_total')).toBe(2);
    } finally {
      await db.end();
      await client.endAsync();
    }
  });
});
