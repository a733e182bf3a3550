// Fault 3 of issue 19: after a database outage the backlog used to go out as one COPY (one
// string of every pending row). Every COPY holds at most INGEST_BATCH_ROWS rows, whatever is
// pending: a backlog of many batches is written in batches of that size, nothing lost, nothing
// stored twice.
import crypto from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { http, startTestService, type TestService } from '../helpers/service.js';
import { createDevice, createTemplate, deviceClient, eventually, historyCount, metric } from '../helpers/registry-fixtures.js';
import { checkSequence, gaugeSum, publishSequence, takeDatabaseAway } from '../helpers/faults.js';

const BATCH_ROWS = 50; // a bucket bound of ingest_batch_rows
const BACKLOG = 600; // 12 batches

describe('a backlog after a database outage', () => {
  let svc: TestService;
  const tenant = `bb${crypto.randomBytes(3).toString('hex')}`;
  let device: string;

  beforeAll(async () => {
    // The run's external broker: it takes the whole backlog at once (the embedded one reads a
    // device's next message only after its PUBACK). The shard side is the same in both modes.
    svc = await startTestService({ INGEST_BATCH_ROWS: String(BATCH_ROWS), INGEST_WORKERS: '1' });
    const t = await createTemplate(svc.service.pool, tenant, 't', [{ label: 'seq', type: 'dynamic', value_type: 'integer' }]);
    device = await createDevice(svc.service.pool, tenant, [t]);
  });
  afterAll(() => svc?.stop());

  it('goes out in COPY batches of at most INGEST_BATCH_ROWS rows, nothing lost or stored twice', async () => {
    const client = await deviceClient(svc.env.MQTT_URL!);
    const topic = `${tenant}:${device}/attrs`;
    const db = new pg.Pool({ connectionString: svc.env.DATABASE_URL, max: 2 });
    db.on('error', () => undefined); // its idle connections are ended by the outage too
    try {
      // The device is cached before the outage; its messages then wait only for the COPY.
      expect(await publishSequence(client, topic, 0, 1)).toEqual([0]);
      const restore = await takeDatabaseAway(svc.env.DATABASE_URL!);
      let acked: Promise<number[]>;
      try {
        acked = publishSequence(client, topic, 1, BACKLOG);
        await eventually(async () => (await gaugeSum(svc.base, 'ingest_queue_depth')) >= BACKLOG || undefined, 'the backlog to be held');
        // Let the shard worker take every batch of the backlog into its buffers.
        await new Promise((r) => setTimeout(r, 1000));
      } finally {
        await restore();
      }
      const numbers = await acked;
      expect(numbers).toHaveLength(BACKLOG);
      await eventually(async () => (await historyCount(db, tenant, device)) >= BACKLOG + 1 || undefined, 'the backlog stored', 30_000);
      const check = await checkSequence(db, tenant, [0, ...numbers]);
      expect(check).toEqual({ lost: [], duplicates: 0, stored: BACKLOG + 1 });

      // Metrics come from the workers every 250 ms: wait until every row is counted.
      const text = await eventually(async () => {
        const t = (await http('GET', `${svc.base}/metrics`)).text;
        return metric(t, 'ingest_batch_rows_sum') >= BACKLOG + 1 && t;
      }, 'the batches in the metrics');
      const batches = metric(text, 'ingest_batch_rows_count');
      expect(batches).toBeGreaterThanOrEqual(Math.ceil(BACKLOG / BATCH_ROWS));
      expect(metric(text, `ingest_batch_rows_bucket{le="${BATCH_ROWS}"}`)).toBe(batches);
      expect(metric(text, 'ingest_batch_rows_sum')).toBe(BACKLOG + 1);
    } finally {
      await db.end();
      await client.endAsync();
    }
  });
});
