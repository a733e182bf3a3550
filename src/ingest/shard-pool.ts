// The Piscina pool hosting the shard actors. A custom loadBalancer pins every shard to one
// worker: the task carries its shard in its queue options (queueOptionsSymbol), and
// the balancer always returns the shard's owner, never a "least busy" one, so one device's
// batches reach one actor in the order they were sent. concurrentTasksPerWorker is large
// because the actor queues batches itself (it takes the next batch while a COPY is in flight);
// stricterFIFO keeps a task that could not be placed (its worker is being replaced) at the head
// of the queue. Atomics are disabled: Piscina's idle Atomics.wait() would block the actor's
// batch timers and the registry events that invalidate its cache.
import path from 'node:path';
import { existsSync } from 'node:fs';
import type { ResourceLimits } from 'node:worker_threads';
import { Piscina, queueOptionsSymbol } from 'piscina';
import { projectRoot } from '../paths.js';
import type { Logger } from '../log.js';
import { CopyTurn } from './copy-turn.js';
import type { ShardTask, ShardWorkerSettings, WorkerMetricsDelta } from './protocol.js';

/** The compiled worker: tests and `npm start` both run the real code from dist/. */
const SHARD_WORKER_FILE = path.join(projectRoot, 'dist/workers/shard.js');

interface PinnedTask extends ShardTask {
  [queueOptionsSymbol]: { shard: number };
}

type LoadBalancer = NonNullable<NonNullable<ConstructorParameters<typeof Piscina>[0]>['loadBalancer']>;

interface WorkerView {
  id: number;
  destroyed: boolean;
  terminating: boolean;
}

/** Chooses the owner of `shard`: its current owner if alive, else the worker with the fewest shards. */
export function pinnedBalancer(owners: Map<number, number>): LoadBalancer {
  return (task, workers) => {
    const shard = (task[queueOptionsSymbol] as { shard?: number } | null)?.shard ?? 0;
    const alive = workers.filter((w) => !w.destroyed && !w.terminating);
    const ownerId = owners.get(shard);
    if (ownerId !== undefined) {
      const owner = alive.find((w) => w.id === ownerId);
      // The owner exists but is not offered (not ready yet): wait for it rather than reorder.
      return owner ?? null;
    }
    if (alive.length === 0) return null;
    const load = new Map<number, number>(alive.map((w) => [w.id, 0]));
    for (const id of owners.values()) if (load.has(id)) load.set(id, load.get(id)! + 1);
    const chosen = [...alive].sort((a, b) => load.get(a.id)! - load.get(b.id)! || a.id - b.id)[0]!;
    owners.set(shard, chosen.id);
    return chosen;
  };
}

export class ShardPool {
  private readonly piscina: Piscina;
  /** shard -> threadId of its worker. */
  private readonly owners = new Map<number, number>();

  constructor(
    readonly shards: number,
    settings: ShardWorkerSettings,
    private readonly log: Logger,
    resourceLimits?: ResourceLimits,
  ) {
    if (!existsSync(SHARD_WORKER_FILE)) {
      throw new Error(`the shard worker ${SHARD_WORKER_FILE} is missing; run "npm run build" first`);
    }
    this.piscina = new Piscina({
      filename: SHARD_WORKER_FILE,
      minThreads: shards,
      maxThreads: shards,
      idleTimeout: Infinity,
      concurrentTasksPerWorker: 100_000,
      stricterFIFO: true,
      atomics: 'disabled',
      maxQueue: Infinity,
      workerData: settings,
      resourceLimits,
      loadBalancer: pinnedBalancer(this.owners),
    });
    // A replaced worker's shards go to whoever has the fewest (its tasks are retried by the
    // router, in order), and a COPY turn it held is free at once (its mark: thread id + 1).
    // A dead worker's thread id reads -1, so the dead are found as the known ids no longer alive.
    // Piscina announces the destruction before it takes the worker out of `threads` (and a
    // worker that failed with an uncaught error still shows its id then): the dead are looked
    // for once that is done, a microtask later, before any replacement can take a task.
    const known = new Set<number>(this.piscina.threads.map((t) => t.threadId));
    this.piscina.on('workerCreate', (worker: WorkerView) => known.add(worker.id));
    this.piscina.on('workerDestroy', () =>
      queueMicrotask(() => {
        const alive = new Set(this.piscina.threads.map((t) => t.threadId).filter((id) => id >= 0));
        for (const id of known) {
          if (alive.has(id)) continue;
          known.delete(id);
          for (const [shard, owner] of this.owners) if (owner === id) this.owners.delete(shard);
          if (CopyTurn.releaseFrom(settings.copyTurn, id + 1)) log.warn('a dead shard worker held the COPY turn; released');
        }
      }),
    );
    this.piscina.on('error', (err: Error) => this.log.error('shard worker failed', { error: err.message }));
  }

  /**
   * Runs a batch on its shard's actor. The batch's buffers are copied and the copies moved to
   * the worker (measured: a structured clone of the typed arrays costs ~4x a copy plus a
   * transfer), so `task` itself stays usable for a retry.
   */
  run(shard: number, task: ShardTask): Promise<WorkerMetricsDelta> {
    const moved: PinnedTask = {
      keys: task.keys,
      payload: task.payload.slice(),
      offsets: task.offsets.slice(),
      received: task.received.slice(),
      [queueOptionsSymbol]: { shard },
    };
    const transferList = [moved.payload.buffer, moved.offsets.buffer, moved.received.buffer] as ArrayBuffer[];
    return this.piscina.run(moved, { transferList }) as Promise<WorkerMetricsDelta>;
  }

  /** Thread ids owning each shard (tests check the pinning). */
  ownership(): Map<number, number> {
    return new Map(this.owners);
  }

  async close(): Promise<void> {
    await this.piscina.destroy();
  }
}
