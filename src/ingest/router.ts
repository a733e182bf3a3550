// The ingest router, the broker link's inbox: receives every message the link takes, each with
// its ack handle, knows only the device (from the topic or the MQTT session), assigns it to
// shard hash(tenant/id) % N, collects each shard's messages into one batch (copied into one
// buffer), and hands the batch to that shard's actor. A batch whose worker died is sent again
// (at least once). Too many unacknowledged messages make it ask the broker link to stop reading.
//
// What an ack means is decided here, and only here: every message is counted once when it
// comes in and settled exactly once, acknowledged when the actor reports its batch committed,
// or, when it is dropped for good (counted by reason), at once.
import type { Logger } from '../log.js';
import { NO_ACK, type AckHandle, type Inbox, type Unreadable } from '../broker/link.js';
import { deviceKey } from '../topics.js';
import type { DropReason } from './drop-reasons.js';
import { emptyWorkerMetrics, type IngestMetricsDelta, type ShardTask, type WorkerMetricsDelta } from './protocol.js';
import { addLatency, emptyLatency, observeSince } from './latency.js';
import { shardFor } from './shard.js';

export interface ShardRunner {
  readonly shards: number;
  run(shard: number, task: ShardTask): Promise<WorkerMetricsDelta>;
}

class Pending {
  keys: string[] = [];
  offsets: number[] = [];
  received: number[] = [];
  acks: AckHandle[] = [];
  bytes = new Uint8Array(16 * 1024);
  used = 0;

  add(key: string, payload: Uint8Array, receivedUs: number, ack: AckHandle): void {
    if (this.used + payload.length > this.bytes.length) {
      const grown = new Uint8Array(Math.max(this.bytes.length * 2, this.used + payload.length));
      grown.set(this.bytes.subarray(0, this.used));
      this.bytes = grown;
    }
    this.offsets.push(this.used);
    this.bytes.set(payload, this.used);
    this.used += payload.length;
    this.keys.push(key);
    this.received.push(receivedUs);
    this.acks.push(ack);
  }

  get count(): number {
    return this.keys.length;
  }
}

/** A batch in flight: the task and the messages to acknowledge when it is committed. */
interface Batch {
  /** Increases with every batch: the order a shard's batches are sent again in. */
  seq: number;
  shard: number;
  task: ShardTask;
  acks: AckHandle[];
}

/** The drop reason of what the broker link could not hand over as a device message. */
const UNREADABLE: Record<Unreadable, DropReason> = {
  not_a_device_topic: 'bad_topic',
  packet_too_large: 'oversized',
};

const FLUSH_AT_MESSAGES = 2000;
const FLUSH_AT_BYTES = 1 << 20;
const RETRY_MS = 250;

export interface RouterOptions {
  maxMessageBytes: number;
  maxPending: number;
  /**
   * How long a shard's batch waits in the router for more messages (the service passes
   * INGEST_BATCH_MS). Every batch handed to a worker has a fixed cost on both threads, so
   * fewer, fuller batches save CPU: measured at 20,000 msg/s, holding 50 ms instead of 10 ms
   * took the service from ~11.8 to ~8.8 µs of CPU a message (docs/messaging.md §9).
   */
  holdMs: number;
  log: Logger;
  /** true: stop reading from the broker; false: resume. */
  onPressure(paused: boolean): void;
}

export class IngestRouter implements Inbox {
  private readonly pending: Pending[];
  /** Accepted, not yet acknowledged, per shard. */
  private readonly unacked: number[];
  private totalUnacked = 0;
  private paused = false;
  private flushTimer: NodeJS.Timeout | undefined;
  private lastUs = 0;
  private delta: IngestMetricsDelta;
  private outstanding = 0;
  private idleWaiters: Array<() => void> = [];
  private stopped = false;
  private seq = 0;
  /**
   * Per shard, while its failed batches wait to be sent again (its worker died, say): those and
   * any newer batch of the shard, sent together in their original order, so one device's
   * messages still reach the (new) worker in order.
   */
  private readonly held: Array<Batch[] | undefined>;

  constructor(
    private readonly runner: ShardRunner,
    private readonly opts: RouterOptions,
  ) {
    this.pending = Array.from({ length: runner.shards }, () => new Pending());
    this.unacked = new Array<number>(runner.shards).fill(0);
    this.held = new Array<Batch[] | undefined>(runner.shards);
    this.delta = IngestRouter.emptyDelta(runner.shards);
  }

  static emptyDelta(shards: number): IngestMetricsDelta {
    return {
      ...emptyWorkerMetrics(),
      messagesReceived: 0,
      messagesAcknowledged: 0,
      messagesCommitted: 0,
      ackLatency: emptyLatency(),
      queueDepth: new Array<number>(shards).fill(0),
      cachedDevicesByShard: new Array<number>(shards).fill(0),
    };
  }

  /** A message of device `tenant`/`id`. `payload` is copied at once (it may be a view into a socket buffer). */
  accept(tenant: string, id: string, payload: Uint8Array, ack: AckHandle): void {
    this.delta.messagesReceived++;
    if (payload.length > this.opts.maxMessageBytes) {
      this.drop('oversized', ack);
      return;
    }
    // The queue is fixed: past INGEST_MAX_PENDING a message with nothing to acknowledge (QoS 0)
    // is dropped. The embedded broker reads a QoS 0 sender's next message at once, so holding
    // them would grow without bound; a QoS 1 message waits instead (its PUBACK with its commit;
    // the embedded broker reads nothing more from that sender once the packets of the socket
    // chunk it came in are handled: docs/operations.md §3).
    if (ack === NO_ACK && this.totalUnacked >= this.opts.maxPending) {
      this.drop('overload', ack);
      return;
    }
    // Receive time in µs, strictly increasing: arrival order is kept even within a millisecond.
    const now = Date.now() * 1000;
    this.lastUs = now > this.lastUs ? now : this.lastUs + 1;
    const key = deviceKey(tenant, id);
    const shard = shardFor(key, this.runner.shards);
    const p = this.pending[shard]!;
    p.add(key, payload, this.lastUs, ack);
    this.unacked[shard]!++;
    this.totalUnacked++;
    if (!this.paused && this.totalUnacked >= this.opts.maxPending) {
      this.paused = true;
      this.opts.onPressure(true);
    }
    if (p.count >= FLUSH_AT_MESSAGES || p.used >= FLUSH_AT_BYTES) {
      this.flushShard(shard);
    } else if (!this.flushTimer) {
      this.flushTimer = setTimeout(() => {
        this.flushTimer = undefined;
        for (let s = 0; s < this.pending.length; s++) this.flushShard(s);
      }, this.opts.holdMs);
    }
  }

  /** A message that is no device message: counted, and dropped. */
  refuse(why: Unreadable, ack: AckHandle): void {
    this.delta.messagesReceived++;
    this.drop(UNREADABLE[why], ack);
  }

  /** Metric deltas since the previous call (queue depths and cache sizes are absolute). */
  takeMetrics(): IngestMetricsDelta {
    const d = this.delta;
    d.queueDepth = [...this.unacked];
    this.delta = IngestRouter.emptyDelta(this.runner.shards);
    this.delta.cachedDevicesByShard = [...d.cachedDevicesByShard];
    return d;
  }

  get unacknowledged(): number {
    return this.totalUnacked;
  }

  /** Sends what is pending and resolves when every accepted message was acknowledged. */
  async drain(): Promise<void> {
    for (;;) {
      for (let s = 0; s < this.pending.length; s++) this.flushShard(s);
      if (this.outstanding === 0) return;
      await new Promise<void>((resolve) => this.idleWaiters.push(resolve));
    }
  }

  /** A message that will never be stored: counted by reason and acknowledged, so the broker does not send it again. */
  private drop(reason: DropReason, ack: AckHandle): void {
    this.delta.dropped[reason] = (this.delta.dropped[reason] ?? 0) + 1;
    this.delta.messagesAcknowledged++;
    ack.ack();
  }

  /** No more retries (shutdown timed out). */
  stop(): void {
    this.stopped = true;
    clearTimeout(this.flushTimer);
  }

  private flushShard(shard: number): void {
    const p = this.pending[shard]!;
    if (p.count === 0) return;
    this.pending[shard] = new Pending();
    p.offsets.push(p.used);
    const task: ShardTask = {
      keys: p.keys.join('\0'),
      payload: p.bytes.subarray(0, p.used), // copied when sent (see ShardPool.run)
      offsets: Uint32Array.from(p.offsets),
      received: Float64Array.from(p.received),
    };
    this.outstanding++;
    const batch: Batch = { seq: ++this.seq, shard, task, acks: p.acks };
    const held = this.held[shard];
    if (held) held.push(batch);
    else this.submit(batch);
  }

  /** A failed batch waits RETRY_MS, and is sent again with the shard's others, in order. */
  private retry(batch: Batch): void {
    let held = this.held[batch.shard];
    if (!held) {
      held = this.held[batch.shard] = [];
      setTimeout(() => {
        this.held[batch.shard] = undefined;
        if (this.stopped) return;
        for (const b of held!.sort((x, y) => x.seq - y.seq)) this.submit(b);
      }, RETRY_MS).unref();
    }
    held.push(batch);
  }

  private submit(batch: Batch): void {
    this.runner.run(batch.shard, batch.task).then(
      (delta) => {
        for (const ack of batch.acks) ack.ack();
        const now = Date.now();
        for (const receivedUs of batch.task.received) observeSince(this.delta.ackLatency, receivedUs, now);
        this.delta.messagesAcknowledged += batch.acks.length;
        this.delta.messagesCommitted += batch.acks.length;
        this.settled(batch.shard, batch.acks.length, delta);
      },
      (err: Error) => {
        if (this.stopped) return;
        this.opts.log.warn('a shard batch failed; sending it again', {
          shard: batch.shard,
          messages: batch.acks.length,
          error: err.message,
        });
        this.retry(batch);
      },
    );
  }

  private settled(shard: number, messages: number, w: WorkerMetricsDelta): void {
    this.unacked[shard]! -= messages;
    this.totalUnacked -= messages;
    const d = this.delta;
    d.messagesStored += w.messagesStored;
    d.valuesReceived += w.valuesReceived;
    d.valuesStored += w.valuesStored;
    for (const [reason, n] of Object.entries(w.dropped) as Array<[DropReason, number]>) d.dropped[reason] = (d.dropped[reason] ?? 0) + n;
    d.cacheHits += w.cacheHits;
    d.cacheMisses += w.cacheMisses;
    for (const r of w.batchRows) d.batchRows.push(r);
    for (const s of w.copySeconds) d.copySeconds.push(s);
    addLatency(d.commitLatency, w.commitLatency);
    d.cachedDevicesByShard[shard] = w.cachedDevices;
    if (this.paused && this.totalUnacked <= this.opts.maxPending / 2) {
      this.paused = false;
      this.opts.onPressure(false);
    }
    this.outstanding--;
    if (this.outstanding === 0 && this.idleWaiters.length > 0) {
      const waiters = this.idleWaiters;
      this.idleWaiters = [];
      for (const w of waiters) w();
    }
  }
}
