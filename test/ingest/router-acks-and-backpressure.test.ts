// The ingest router: batches per shard, acknowledges a message only once its batch is committed
// (at once when dropped), sends a failed batch again, and pauses / resumes the broker link.
import { describe, expect, it } from 'vitest';
import { emptyWorkerMetrics, type WorkerMetricsDelta } from '../../src/ingest/protocol.js';

describe('the router', () => {
  const quiet = {
    debug() {},
    info() {},
    warn() {},
    error() {},
    child() {
      return quiet;
    },
    level: 'silent' as const,
  };
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
        new Promise<WorkerMetricsDelta>((resolve, reject) =>
          calls.push({ shard, keys: task.keys.split('\0'), resolve: () => resolve(emptyWorkerMetrics()), reject }),
        ),
    };
    const router = new IngestRouter(runner, { maxMessageBytes: 100, maxPending: 1000, holdMs: 10, log: quiet, onPressure() {} });
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

  it("sends a dead worker's batches again in their order, and a newer batch of the shard only after them", async () => {
    const { IngestRouter } = await import('../../src/ingest/router.js');
    const calls: Array<{ keys: string[]; resolve: () => void; reject: (e: Error) => void }> = [];
    const runner = {
      shards: 1,
      run: (_shard: number, task: { keys: string }) =>
        new Promise<WorkerMetricsDelta>((resolve, reject) =>
          calls.push({ keys: task.keys.split('\0'), resolve: () => resolve(emptyWorkerMetrics()), reject }),
        ),
    };
    const router = new IngestRouter(runner, { maxMessageBytes: 100, maxPending: 1000, holdMs: 1, log: quiet, onPressure() {} });
    const a = acker();
    router.accept('t', 'one', Buffer.from('{}'), a.handle(1));
    await eventuallyTrue(() => calls.length === 1);
    router.accept('t', 'two', Buffer.from('{}'), a.handle(2));
    await eventuallyTrue(() => calls.length === 2);
    // The worker dies: both its batches fail (the later one first, as may happen)...
    calls[1]!.reject(new Error('worker died'));
    calls[0]!.reject(new Error('worker died'));
    // ... and a newer batch of the shard comes while they wait to be sent again.
    await new Promise((r) => setTimeout(r, 20));
    router.accept('t', 'three', Buffer.from('{}'), a.handle(3));
    await new Promise((r) => setTimeout(r, 50));
    expect(calls).toHaveLength(2); // held behind the failed ones
    await eventuallyTrue(() => calls.length === 5);
    expect(calls.slice(2).map((c) => c.keys)).toEqual([['t/one'], ['t/two'], ['t/three']]);
    for (const c of calls.slice(2)) c.resolve();
    await eventuallyTrue(() => a.acked.length === 3);
    expect(a.acked).toEqual([1, 2, 3]);
  });

  it('asks the broker link to pause above INGEST_MAX_PENDING and to resume below half of it', async () => {
    const { IngestRouter } = await import('../../src/ingest/router.js');
    const pending: Array<() => void> = [];
    const runner = {
      shards: 1,
      run: () => new Promise<WorkerMetricsDelta>((resolve) => pending.push(() => resolve(emptyWorkerMetrics()))),
    };
    const pressure: boolean[] = [];
    const router = new IngestRouter(runner, {
      maxMessageBytes: 100,
      maxPending: 4,
      holdMs: 10,
      log: quiet,
      onPressure: (p) => pressure.push(p),
    });
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

async function eventuallyTrue(cond: () => boolean): Promise<void> {
  for (let i = 0; i < 200 && !cond(); i++) await new Promise((r) => setTimeout(r, 5));
  expect(cond()).toBe(true);
}
