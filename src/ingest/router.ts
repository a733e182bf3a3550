// The ingest router: receives every device message from the broker link with an `ack`
// function, knows only the device (from the topic or the MQTT session), assigns it to shard
// hash(tenant/id) % N, collects each shard's messages into one batch per event-loop turn, and
// hands the batch to that shard's actor. When the actor reports the batch committed, the
// router calls the acks (PUBACK). A batch whose worker died is sent again (at least once).
// Too many unacknowledged messages make it ask the broker link to stop reading.
import type { Logger } from '../log.js';
import { deviceKey } from '../broker/topics.js';
import type { DropReason } from './device-model.js';
import type { IngestMetricsDelta, ShardTask, WorkerMetricsDelta } from './protocol.js';
import { shardFor } from './shard.js';

export type Ack = () => void;

export interface ShardRunner {
  readonly shards: number;
  run(shard: number, task: ShardTask): Promise<WorkerMetricsDelta>;
}

interface Pending {
  tenants: string[];
  ids: string[];
  payloads: Buffer[];
  received: number[];
  acks: Ack[];
  bytes: number;
}

const FLUSH_AT_MESSAGES = 2000;
const FLUSH_AT_BYTES = 1 << 20;
const RETRY_MS = 250;

function emptyPending(): Pending {
  return { tenants: [], ids: [], payloads: [], received: [], acks: [], bytes: 0 };
}

export interface RouterOptions {
  maxMessageBytes: number;
  maxPending: number;
  log: Logger;
  /** true: stop reading from the broker; false: resume. */
  onPressure(paused: boolean): void;
}

export class IngestRouter {
  private readonly pending: Pending[];
  /** Accepted, not yet acknowledged, per shard. */
  private readonly unacked: number[];
  private totalUnacked = 0;
  private paused = false;
  private flushScheduled = false;
  private lastUs = 0;
  private delta: IngestMetricsDelta;
  private outstanding = 0;
  private idleWaiters: Array<() => void> = [];
  private stopped = false;

  constructor(
    private readonly runner: ShardRunner,
    private readonly opts: RouterOptions,
  ) {
    this.pending = Array.from({ length: runner.shards }, emptyPending);
    this.unacked = new Array<number>(runner.shards).fill(0);
    this.delta = IngestRouter.emptyDelta(runner.shards);
  }

  static emptyDelta(shards: number): IngestMetricsDelta {
    return {
      messagesReceived: 0,
      messagesStored: 0,
      valuesReceived: 0,
      valuesStored: 0,
      dropped: {},
      cacheHits: 0,
      cacheMisses: 0,
      batchRows: [],
      copySeconds: [],
      cachedDevices: 0,
      queueDepth: new Array<number>(shards).fill(0),
      cachedDevicesByShard: new Array<number>(shards).fill(0),
    };
  }

  /** A message of device `tenant`/`id`; `ack` is called once it is committed (or dropped). */
  accept(tenant: string, id: string, payload: Buffer, ack: Ack): void {
    this.delta.messagesReceived++;
    if (payload.length > this.opts.maxMessageBytes) {
      this.drop('oversized', ack);
      return;
    }
    // Receive time in µs, strictly increasing: arrival order is kept even within a millisecond.
    const now = Date.now() * 1000;
    this.lastUs = now > this.lastUs ? now : this.lastUs + 1;
    const shard = shardFor(deviceKey(tenant, id), this.runner.shards);
    const p = this.pending[shard]!;
    p.tenants.push(tenant);
    p.ids.push(id);
    p.payloads.push(payload);
    p.received.push(this.lastUs);
    p.acks.push(ack);
    p.bytes += payload.length;
    this.unacked[shard]!++;
    this.totalUnacked++;
    if (!this.paused && this.totalUnacked >= this.opts.maxPending) {
      this.paused = true;
      this.opts.onPressure(true);
    }
    if (p.acks.length >= FLUSH_AT_MESSAGES || p.bytes >= FLUSH_AT_BYTES) {
      this.flushShard(shard);
    } else if (!this.flushScheduled) {
      this.flushScheduled = true;
      setImmediate(() => {
        this.flushScheduled = false;
        for (let s = 0; s < this.pending.length; s++) this.flushShard(s);
      });
    }
  }

  /** A message dropped before routing (counted, and acknowledged: it will never be stored). */
  drop(reason: DropReason, ack: Ack): void {
    this.delta.dropped[reason] = (this.delta.dropped[reason] ?? 0) + 1;
    ack();
  }

  countReceived(): void {
    this.delta.messagesReceived++;
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

  /** No more retries (shutdown timed out). */
  stop(): void {
    this.stopped = true;
  }

  private flushShard(shard: number): void {
    const p = this.pending[shard]!;
    if (p.acks.length === 0) return;
    this.pending[shard] = emptyPending();
    const n = p.acks.length;
    const payload = new Uint8Array(p.bytes);
    const offsets = new Uint32Array(n + 1);
    let at = 0;
    for (let i = 0; i < n; i++) {
      offsets[i] = at;
      payload.set(p.payloads[i]!, at);
      at += p.payloads[i]!.length;
    }
    offsets[n] = at;
    const task: ShardTask = { tenants: p.tenants, ids: p.ids, payload, offsets, received: Float64Array.from(p.received) };
    this.outstanding++;
    this.submit(shard, task, p.acks);
  }

  private submit(shard: number, task: ShardTask, acks: Ack[]): void {
    this.runner.run(shard, task).then(
      (delta) => {
        for (const ack of acks) ack();
        this.settled(shard, acks.length, delta);
      },
      (err: Error) => {
        if (this.stopped) return;
        this.opts.log.warn('a shard batch failed; sending it again', { shard, messages: acks.length, error: err.message });
        setTimeout(() => this.submit(shard, task, acks), RETRY_MS).unref();
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
