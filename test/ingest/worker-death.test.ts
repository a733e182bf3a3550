// Point 7 of issue 19: a shard worker dies (its thread terminated, or failed) while it holds the COPY turn
// and its COPY waits (behind a lock the test holds on history). The turn is free at once (the
// other worker does not wait the 30 s a held turn is otherwise kept), a new worker takes the
// dead one's shards, its batches are sent again, and every message is stored; a message stored
// twice would be counted (none expected here: the dead worker's COPY never committed).
import crypto from 'node:crypto';
import pg from 'pg';
import type { Worker } from 'node:worker_threads';
import type { Piscina } from 'piscina';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../src/log.js';
import { CopyTurn } from '../../src/ingest/copy-turn.js';
import { IngestRouter } from '../../src/ingest/router.js';
import { ShardPool } from '../../src/ingest/shard-pool.js';
import { shardFor } from '../../src/ingest/shard.js';
import { deviceKey } from '../../src/topics.js';
import { useService } from '../helpers/service.js';
import { createDevice, createTemplate, eventually, randomDeviceId } from '../helpers/registry-fixtures.js';
import { checkSequence } from '../helpers/faults.js';

const PER_DEVICE = 20;

describe('a shard worker that dies holding the COPY turn', () => {
  const svc = useService({ MQTT_URL: undefined });
  let db: pg.Pool;

  beforeAll(() => {
    db = new pg.Pool({ connectionString: svc.env.DATABASE_URL, max: 3 });
  });
  afterAll(() => db?.end());

  // A worker is seen to go either way: its thread ended (exit), or an uncaught exception in it
  // (Node emits 'error' on the Worker, then ends the thread; Piscina drops it at the 'error').
  it.each([
    ['terminated', (w: Worker) => w.terminate()],
    ['failed with an uncaught error', (w: Worker) => w.emit('error', new Error('uncaught in the worker'))],
  ])('%s: frees the turn at once, and its batches are stored by the worker that replaces it', async (_how, kill) => {
    // A tenant of its own (the sequence numbers are counted per tenant), one device on each of the two shards.
    const tenant = `wd${crypto.randomBytes(3).toString('hex')}`;
    const devices: string[] = [];
    const t = await createTemplate(db, tenant, 't', [{ label: 'seq', type: 'dynamic', value_type: 'integer' }]);
    while (devices.length < 2) {
      const id = randomDeviceId();
      if (shardFor(deviceKey(tenant, id), 2) === devices.length) devices.push(await createDevice(db, tenant, [t], { id }));
    }
    const copyTurn = CopyTurn.shared();
    const log = createLogger('silent');
    const shards = new ShardPool(
      2,
      {
        databaseUrl: svc.env.DATABASE_URL!,
        logLevel: 'silent',
        logFormat: 'json',
        ingestBatchRows: 5000,
        ingestBatchMs: 10,
        ingestCacheDevices: 1000,
        registryCacheMaxAgeSeconds: 60,
        dbStatementTimeoutMs: 0,
        dbKeepaliveSeconds: 30,
        copyTurn,
      },
      log,
    );
    const router = new IngestRouter(shards, { maxMessageBytes: 1000, maxPending: 10_000, holdMs: 10, log, onPressure() {} });
    const acked: number[] = [];
    const send = (device: number, seq: number) =>
      router.accept(tenant, devices[device]!, Buffer.from(JSON.stringify({ seq })), { ack: () => acked.push(seq) });
    const locker = await db.connect();
    try {
      // Both workers running and their devices cached.
      send(0, 0);
      send(1, 1000);
      await eventually(() => acked.length === 2, 'the first messages');

      await locker.query('BEGIN');
      await locker.query('LOCK TABLE history IN ACCESS EXCLUSIVE MODE');
      for (let i = 1; i <= PER_DEVICE; i++) {
        send(0, i);
        send(1, 1000 + i);
      }
      // One worker holds the turn, its COPY waiting for the lock; the other waits for the turn.
      const cell = new Int32Array(copyTurn);
      const holder = await eventually(() => Atomics.load(cell, 0) || undefined, 'a worker holding the COPY turn');
      // ShardPool's private Piscina: the test kills the worker that holds the turn.
      const threads = (shards as unknown as { piscina: Piscina }).piscina.threads;
      const dead = threads.find((t) => t.threadId === holder - 1);
      expect(dead).toBeDefined();
      await kill(dead!);
      // The turn was released when the pool saw the worker go (not STEAL_MS later).
      await eventually(() => Atomics.load(cell, 0) !== holder || undefined, 'the turn released', 5000);
      await locker.query('COMMIT');

      await eventually(() => acked.length === 2 + 2 * PER_DEVICE || undefined, 'every message acknowledged', 20_000);
      const all = [0, 1000, ...Array.from({ length: PER_DEVICE }, (_, i) => [i + 1, 1001 + i]).flat()];
      const check = await checkSequence(db, tenant, all);
      expect(check.lost).toEqual([]);
      expect(check.duplicates).toBe(0);
    } finally {
      await locker.query('ROLLBACK').catch(() => undefined);
      locker.release();
      router.stop();
      await shards.close();
    }
  });
});
