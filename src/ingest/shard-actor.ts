// The shard actor: runs inside one Piscina worker and owns a set of devices (those whose key
// hashes to its shard). Batches from the router are processed strictly in arrival order
// (one promise chain), so one device's messages are validated and written in order. Rows
// collect in a buffer that is written with one COPY as soon as the writer is free (group
// commit: the router already held the messages INGEST_BATCH_MS); while a COPY runs the next
// buffer fills, so COPYs grow with the load instead of multiplying. A buffer that
// reaches INGEST_BATCH_ROWS is sealed and a new one started, so a COPY never holds more than
// INGEST_BATCH_ROWS rows, however much piled up behind a slow or absent database. A batch's
// promise resolves once every row it produced (and every row before it) is committed; the
// router acknowledges its messages to the broker only then. Per batch the actor asks the device
// cache once (resolve) and, per buffer, the history writer once (write); both wait through
// database outages themselves. A message that would lose values to its device's model (a key
// the model does not know, a value of another type, a translator that fails) while that model
// is older than the message (device-cache.ts) is set aside, and rendered again with the model
// read afresh: one more query per batch that has such messages. The device's later messages of
// the batch are set aside with it, so its messages keep their order.
import { setImmediate } from 'node:timers/promises';
import type { DeviceCache } from './device-cache.js';
import { renderMessage, type DeviceModel, type MessageOutcome } from './device-model.js';
import type { DropReason } from './drop-reasons.js';
import { rowNames, type HistoryWriter } from './history-writer.js';
import type { Logger } from '../log.js';
import { microsToTextCached } from '../time.js';
import { emptyWorkerMetrics, type CommittedBatch, type ShardTask, type WorkerMetricsDelta } from './protocol.js';
import { observeSince } from './latency.js';

interface Deferred {
  resolve: () => void;
}

interface RowBuffer {
  lines: string[];
  /** The time (µs) of each message with rows in `lines` (the writer prepares their partitions). */
  times: number[];
  /** The arrival time (µs) of each message with rows, for the commit latency. */
  received: number[];
  waiters: Deferred[];
  /** The messages with rows, as the live stream shows them once committed. */
  committed: CommittedBatch;
  /** The index in `lines` of each committed message's first row (its rows run to the next one's). */
  firstLines: number[];
}

function emptyBuffer(): RowBuffer {
  return {
    lines: [],
    times: [],
    received: [],
    waiters: [],
    committed: { tenants: [], ids: [], ts: [], received: [], attrs: [] },
    firstLines: [],
  };
}

export interface ShardActorOptions {
  batchRows: number;
  log?: Logger;
  /** Told of every commit's stored messages, after the commit (the live stream; workers/shard.ts). */
  onCommitted?: (batch: CommittedBatch) => void;
}

export class ShardActor {
  private chain: Promise<void> = Promise.resolve();
  private current = emptyBuffer();
  /** Full buffers waiting for their COPY, oldest first (they pile up while the database is away). */
  private readonly sealed: RowBuffer[] = [];
  private writing = false;
  private timer: NodeJS.Timeout | undefined;
  /** Fatal: a payload that is not UTF-8 is refused, not stored with U+FFFD in its place. */
  private readonly decoder = new TextDecoder('utf-8', { fatal: true });
  private metrics = emptyWorkerMetrics();
  private readonly tsText = microsToTextCached();

  constructor(
    private readonly cache: DeviceCache,
    /** What the actor asks of the history writer: one COPY per call. */
    private readonly writer: Pick<HistoryWriter, 'write'>,
    private readonly opts: ShardActorOptions,
  ) {}

  /** Handles one batch from the router; resolves with metric deltas once its rows are committed. */
  handle(task: ShardTask): Promise<WorkerMetricsDelta> {
    return new Promise<void>((resolve, reject) => {
      this.chain = this.chain.then(() => this.process(task, { resolve })).catch(reject);
    }).then(() => this.takeMetrics());
  }

  private takeMetrics(): WorkerMetricsDelta {
    const m = this.metrics;
    const cache = this.cache.takeStats();
    m.cacheHits = cache.hits;
    m.cacheMisses = cache.misses;
    m.cachedDevices = cache.size;
    this.metrics = emptyWorkerMetrics();
    return m;
  }

  private drop(reason: DropReason, n = 1): void {
    this.metrics.dropped[reason] = (this.metrics.dropped[reason] ?? 0) + n;
  }

  private async process(task: ShardTask, done: Deferred): Promise<void> {
    // Registry events (BroadcastChannel) and batches (Piscina's port) arrive on different
    // ports, and Node runs a wake-up's port callbacks in port creation order: Piscina's first.
    // One turn of the loop lets an event that was posted before this batch's messages were even
    // sent reach the cache before the batch reads it.
    await setImmediate();
    const keys = task.keys.split('\0');
    const devices = await this.cache.resolve(keys, task.received);
    const message = (i: number) => task.payload.subarray(task.offsets[i], task.offsets[i + 1]);
    let recheck: number[] | undefined;
    // The devices with a message set aside: their later messages of the batch wait with it, so
    // one device's messages are still rendered (and told to the live stream) in arrival order.
    let aside: Set<string> | undefined;
    for (let i = 0; i < keys.length; i++) {
      const m = devices.model(i);
      if (!m) this.drop('unknown_device');
      else if (aside?.has(keys[i]!) || !this.render(m, message(i), task.received[i]!, this.withRoom(), devices.stale(i))) {
        (recheck ??= []).push(i);
        (aside ??= new Set()).add(keys[i]!);
      }
    }
    if (recheck) {
      const fresh = await this.cache.reload([...aside!]);
      for (const i of recheck) {
        const m = fresh(keys[i]!);
        if (!m) this.drop('unknown_device');
        else this.render(m, message(i), task.received[i]!, this.withRoom(), false);
      }
    }
    // The batch's rows are in this buffer or in sealed ones before it: they commit first.
    this.current.waiters.push(done);
    this.schedule();
  }

  /** The buffer to render the next message into: the current one, unless it is full (then sealed). */
  private withRoom(): RowBuffer {
    if (this.current.lines.length >= this.opts.batchRows) {
      this.sealed.push(this.current);
      this.current = emptyBuffer();
    }
    return this.current;
  }

  /**
   * One message of a known device: its rows into `buf`, its drops counted. With `provisional`
   * (the model is older than the message), a message that would lose values to the model is
   * left out, nothing counted, and false returned: it is rendered again with a fresh model.
   */
  private render(model: DeviceModel, bytes: Uint8Array, receivedUs: number, buf: RowBuffer, provisional: boolean): boolean {
    let payload: string;
    try {
      payload = this.decoder.decode(bytes);
    } catch {
      this.drop('not_json'); // not UTF-8, so not JSON text (RFC 8259 §8.1)
      return true;
    }
    const before = buf.lines.length;
    let outcome: MessageOutcome;
    try {
      outcome = renderMessage(model, payload, receivedUs, this.tsText, buf.lines);
    } catch (err) {
      // A message no rule foresaw must not fail the batch: the router would send it again
      // forever, never acknowledging it. Drop it alone (with any rows it had added).
      buf.lines.length = before;
      this.drop('unprocessable');
      this.opts.log?.error('a message could not be processed; dropped', {
        tenant: model.tenant,
        device: model.id,
        error: (err as Error).message,
      });
      return true;
    }
    if (provisional && (outcome.unknownKeys > 0 || outcome.wrongTypes > 0 || outcome.dropped === 'translation_failed')) {
      buf.lines.length = before;
      return false;
    }
    if (outcome.dropped) {
      this.drop(outcome.dropped);
      return true;
    }
    this.metrics.valuesReceived += outcome.values;
    if (outcome.unknownKeys) this.drop('unknown_key', outcome.unknownKeys);
    if (outcome.wrongTypes) this.drop('wrong_type', outcome.wrongTypes);
    if (outcome.badTimestamp) this.drop('bad_timestamp');
    if (buf.lines.length > before) {
      buf.times.push(outcome.us);
      buf.received.push(receivedUs);
      const c = buf.committed;
      c.tenants.push(model.tenant);
      c.ids.push(model.id);
      c.ts.push(outcome.us);
      c.received.push(receivedUs);
      c.attrs.push(outcome.attrs ?? '{}');
      buf.firstLines.push(before);
    }
    return true;
  }

  /**
   * Writes on the next turn of the event loop, unless a write runs (it looks at the buffer when
   * it finishes). Measured against waiting INGEST_BATCH_MS here too (docs/messaging.md §9):
   * publish → stream p50 146 → 89 ms, p99 260 → 209 ms at 25,000 msg/s, ingest rate unchanged.
   */
  private schedule(): void {
    if (this.writing || this.timer) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      void this.flush();
    }, 0);
  }

  /**
   * Tells the live stream of a buffer's committed messages, without the values the database
   * rejected (the rest of the buffer was committed all the same), and returns how many messages
   * have a value committed. Never throws: the messages are stored, and their acknowledgements
   * must not wait on what the stream makes of them.
   */
  private tellCommitted(buf: RowBuffer, rejectedLines: string[]): number {
    let committed = buf.committed;
    try {
      if (rejectedLines.length > 0) committed = storedOnly(buf, counted(rejectedLines));
      if (this.opts.onCommitted && committed.ids.length > 0) this.opts.onCommitted(committed);
    } catch (err) {
      this.opts.log?.error('committed messages could not be passed to the live stream', { error: err as Error });
    }
    return committed.ids.length;
  }

  private async flush(): Promise<void> {
    if (this.writing) return;
    clearTimeout(this.timer);
    this.timer = undefined;
    let buf = this.sealed.shift();
    if (!buf) {
      buf = this.current;
      if (buf.waiters.length === 0 && buf.lines.length === 0) return;
      this.current = emptyBuffer();
    }
    this.writing = true;
    try {
      // One message's rows are never split across buffers, so a buffer may end past the limit
      // by the rows of its last message: those go in a COPY of their own.
      const rejectedLines: string[] = [];
      for (let at = 0; at < buf.lines.length; at += this.opts.batchRows) {
        const lines = at === 0 && buf.lines.length <= this.opts.batchRows ? buf.lines : buf.lines.slice(at, at + this.opts.batchRows);
        const { seconds, rejected, rejectedLines: refused } = await this.writer.write(lines, buf.times);
        this.metrics.copySeconds.push(seconds);
        this.metrics.batchRows.push(lines.length);
        this.metrics.valuesStored += lines.length - rejected;
        if (rejected) this.drop('db_rejected', rejected);
        // (not push(...refused): past ~120,000 arguments, INGEST_BATCH_ROWS allowing 1,000,000, it throws)
        for (const l of refused) rejectedLines.push(l);
      }
      if (buf.lines.length > 0) {
        const now = Date.now();
        for (const receivedUs of buf.received) observeSince(this.metrics.commitLatency, receivedUs, now);
        // Committed: now, and only now, the live stream may show these messages; stored are those
        // with a value committed (before, found by an audit, also those whose every row was rejected).
        this.metrics.messagesStored += this.tellCommitted(buf, rejectedLines);
      }
    } finally {
      this.writing = false;
    }
    for (const w of buf.waiters) w.resolve();
    // What arrived meanwhile goes in the next COPY, at once.
    const next = this.current;
    if (this.sealed.length > 0 || next.waiters.length > 0 || next.lines.length > 0) void this.flush();
  }
}

/**
 * The committed messages of `buf` without the rows the database rejected (`rejected`: how many
 * times each row text was); a message left with none is not one. Equal rows are rejected from
 * the last: the database stored the first (a unique index added by hand refuses its twin: a
 * message sent twice), and a row refused for itself is refused each time.
 */
function storedOnly(buf: RowBuffer, rejected: Map<string, number>): CommittedBatch {
  const c = buf.committed;
  const kept: Array<[number, string]> = [];
  for (let i = c.ids.length - 1; i >= 0; i--) {
    const rows = buf.lines.slice(buf.firstLines[i], buf.firstLines[i + 1] ?? buf.lines.length);
    const refused = rows.filter((l) => {
      const n = rejected.get(l);
      if (!n) return false;
      rejected.set(l, n - 1);
      return true;
    });
    let attrs = c.attrs[i]!;
    if (refused.length === rows.length) continue;
    if (refused.length > 0) {
      const values = JSON.parse(attrs) as Record<string, unknown>;
      for (const l of refused) delete values[rowNames(l).attr];
      attrs = JSON.stringify(values);
    }
    kept.push([i, attrs]);
  }
  const out: CommittedBatch = { tenants: [], ids: [], ts: [], received: [], attrs: [] };
  for (const [i, attrs] of kept.reverse()) {
    out.tenants.push(c.tenants[i]!);
    out.ids.push(c.ids[i]!);
    out.ts.push(c.ts[i]!);
    out.received.push(c.received[i]!);
    out.attrs.push(attrs);
  }
  return out;
}

/** How many times each text is in `lines`. */
function counted(lines: string[]): Map<string, number> {
  const n = new Map<string, number>();
  for (const l of lines) n.set(l, (n.get(l) ?? 0) + 1);
  return n;
}
