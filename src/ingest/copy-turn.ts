// One COPY into history at a time per service instance, taken in turns by the shard workers
// (a lock word in shared memory). Validation stays parallel; only the writes queue. Two COPY
// streams into the same index on a 2-core machine cost PostgreSQL more CPU per row than one
// (measured: docs/messaging.md §9), and a worker waiting for its turn keeps filling its next
// batch, so batches grow instead of commits multiplying.
//
// The turn is an optimisation, never a correctness rule: a worker that waited STEAL_MS for a
// turn held by the same holder takes it anyway (a crashed worker cannot stall ingest), and two
// COPYs at once are merely slower.
import { threadId } from 'node:worker_threads';

const FREE = 0;
const STEAL_MS = 30_000;

type WaitAsync = (cell: Int32Array, index: number, value: number, timeoutMs: number) => { async: boolean; value: Promise<string> | string };
const waitAsync = (Atomics as unknown as { waitAsync: WaitAsync }).waitAsync;

export class CopyTurn {
  private readonly cell: Int32Array;

  /**
   * `mark`: this taker's mark in the cell (default: its thread id + 1; the main thread's id is 0).
   * `stealMs`: how long one holder may keep the turn before a waiter takes it anyway.
   */
  constructor(
    shared: SharedArrayBuffer,
    private readonly mark = threadId + 1,
    private readonly stealMs = STEAL_MS,
  ) {
    this.cell = new Int32Array(shared);
  }

  static shared(): SharedArrayBuffer {
    return new SharedArrayBuffer(4);
  }

  async take(): Promise<void> {
    let waitedFor = FREE;
    let since = 0;
    for (;;) {
      const holder = Atomics.compareExchange(this.cell, 0, FREE, this.mark);
      if (holder === FREE) return;
      if (holder !== waitedFor) {
        waitedFor = holder;
        since = performance.now();
      } else if (performance.now() - since >= this.stealMs) {
        if (Atomics.compareExchange(this.cell, 0, holder, this.mark) === holder) return;
      }
      const w = waitAsync(this.cell, 0, holder, Math.min(1000, this.stealMs));
      if (w.async) await w.value;
    }
  }

  /**
   * Frees the turn if `mark` holds it: its holder died (the pool saw its worker go), and the
   * others need not wait STEAL_MS for it. True if it was held.
   */
  static releaseFrom(shared: SharedArrayBuffer, mark: number): boolean {
    const cell = new Int32Array(shared);
    if (mark === FREE || Atomics.compareExchange(cell, 0, mark, FREE) !== mark) return false;
    Atomics.notify(cell, 0);
    return true;
  }

  give(): void {
    // Only our own turn is given back (a stolen one belongs to the thief now).
    if (Atomics.compareExchange(this.cell, 0, this.mark, FREE) === this.mark) Atomics.notify(this.cell, 0, 1);
  }
}
