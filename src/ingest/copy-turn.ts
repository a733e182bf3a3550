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
/** How long a taker lets the others waiting go first before it competes anyway (one of them may be slow to wake). */
const YIELD_MS = 100;
/**
 * How long another taker may wait before a giver asking again lets it go first. Handing the
 * turn over costs the database an idle moment (the other thread has to wake up), so the giver
 * keeps it while the others have waited less than this: each hand-over passes on a batch grown
 * meanwhile, and no shard waits much longer than this for its COPY.
 */
const PATIENCE_MS = 200;
/** Waiting takers announce themselves in this many slots (a taker finding none free waits unannounced). */
const SLOTS = 64;
/** Wall-clock milliseconds as one shared cell holds them (threads' performance.now() origins differ). */
const clockMs = () => Date.now() % 2 ** 31;

// Atomics.waitAsync is in Node 20 but in TypeScript's ES2024 lib, not the ES2023 one this project builds with.
type WaitAsync = (cell: Int32Array, index: number, value: number, timeoutMs: number) => { async: boolean; value: Promise<string> | string };
const waitAsync = (Atomics as unknown as { waitAsync: WaitAsync }).waitAsync;

// The shared cells: [0] the holder's mark (FREE: nobody); [1..SLOTS] the marks of takers
// waiting for the turn, [SLOTS+1..2*SLOTS] since when (clockMs; 0: just now). A worker gives the
// turn back and asks for it again within one tick (its next batch is ready), long before a
// waiter in another thread has woken up: without the slots, the giver took the turn back every
// time and a waiter could wait for seconds (seen: 9.7 s) while its shard acknowledged nothing.
// So a taker that sees another mark waiting for PATIENCE_MS lets it go first (until one of them
// holds the turn, or YIELD_MS).
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
    return new SharedArrayBuffer(4 * (1 + 2 * SLOTS));
  }

  async take(): Promise<void> {
    await this.letOthersFirst();
    let slot = 0;
    let waitedFor = FREE;
    let since = 0;
    try {
      for (;;) {
        const holder = Atomics.compareExchange(this.cell, 0, FREE, this.mark);
        if (holder === FREE) return;
        if (holder !== waitedFor) {
          waitedFor = holder;
          since = performance.now();
        } else if (performance.now() - since >= this.stealMs) {
          if (Atomics.compareExchange(this.cell, 0, holder, this.mark) === holder) return;
        }
        if (slot === 0) slot = this.announce();
        const w = waitAsync(this.cell, 0, holder, Math.min(1000, this.stealMs));
        if (w.async) await w.value;
      }
    } finally {
      if (slot !== 0) {
        Atomics.store(this.cell, slot + SLOTS, 0);
        if (Atomics.compareExchange(this.cell, slot, this.mark, FREE) === this.mark) Atomics.notify(this.cell, 0);
      }
    }
  }

  /**
   * Frees the turn if `mark` holds it, and the slots it waited in: its holder died (the pool saw
   * its worker go), and the others need not wait STEAL_MS for it. True if it held the turn.
   */
  static releaseFrom(shared: SharedArrayBuffer, mark: number): boolean {
    const cell = new Int32Array(shared);
    if (mark === FREE) return false;
    for (let i = 1; i <= SLOTS; i++) if (Atomics.compareExchange(cell, i, mark, FREE) === mark) Atomics.store(cell, i + SLOTS, 0);
    const held = Atomics.compareExchange(cell, 0, mark, FREE) === mark;
    Atomics.notify(cell, 0);
    return held;
  }

  give(): void {
    // Only our own turn is given back (a stolen one belongs to the thief now). Every sleeper is
    // woken: the waiters race for the turn, and a taker letting them first sees who won.
    if (Atomics.compareExchange(this.cell, 0, this.mark, FREE) === this.mark) Atomics.notify(this.cell, 0);
  }

  /** While the turn is free and another mark has waited PATIENCE_MS for it, waits (at most YIELD_MS) for that one to take it. */
  private async letOthersFirst(): Promise<void> {
    const until = performance.now() + YIELD_MS;
    while (Atomics.load(this.cell, 0) === FREE && this.othersWaiting()) {
      const left = until - performance.now();
      if (left <= 0) return;
      const w = waitAsync(this.cell, 0, FREE, left);
      if (w.async) await w.value;
    }
  }

  private othersWaiting(): boolean {
    const now = clockMs();
    for (let i = 1; i <= SLOTS; i++) {
      const m = Atomics.load(this.cell, i);
      if (m === FREE || m === this.mark) continue;
      const since = Atomics.load(this.cell, i + SLOTS);
      if (since !== 0 && (now - since + 2 ** 31) % 2 ** 31 >= PATIENCE_MS) return true;
    }
    return false;
  }

  /** Takes a free slot for this mark and notes since when it waits (0: none free). */
  private announce(): number {
    for (let i = 1; i <= SLOTS; i++) {
      if (Atomics.compareExchange(this.cell, i, FREE, this.mark) !== FREE) continue;
      Atomics.store(this.cell, i + SLOTS, clockMs());
      return i;
    }
    return 0;
  }
}
