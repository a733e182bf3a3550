// Acknowledgement statistics of a load generator: publish-to-PUBACK latencies in a logarithmic
// histogram (5 % wide buckets from 0.1 ms), and the longest time without any PUBACK at all.
// With the embedded broker a device's PUBACK is the service's acknowledgement after the commit,
// so these are the service's ack latencies and ack gaps as its devices see them.

const FIRST_MS = 0.1;
const GROWTH = 1.05;

/** The bucket of a latency. */
export function bucketOf(ms: number): number {
  return ms <= FIRST_MS ? 0 : Math.ceil(Math.log(ms / FIRST_MS) / Math.log(GROWTH));
}

/** The upper bound (ms) of a bucket. */
export function bucketLimit(bucket: number): number {
  return FIRST_MS * GROWTH ** bucket;
}

/** Sparse histogram: bucket -> count. */
export type Histogram = Map<number, number>;

export function addInto(into: Histogram, pairs: Array<[number, number]>): void {
  for (const [b, n] of pairs) into.set(b, (into.get(b) ?? 0) + n);
}

/** The latency (ms, a bucket's upper bound: at most 5 % above the true value) below which a share `p` (0..1) of the samples fall. */
export function percentile(h: Histogram, p: number): number {
  const total = [...h.values()].reduce((a, b) => a + b, 0);
  if (total === 0) return 0;
  const rank = Math.ceil(p * total);
  let seen = 0;
  for (const b of [...h.keys()].sort((x, y) => x - y)) {
    seen += h.get(b)!;
    if (seen >= rank) return bucketLimit(b);
  }
  return 0;
}

export class AckStats {
  private hist: Histogram = new Map();
  private lastAck = 0;
  private maxGap = 0;

  /** A PUBACK came in, `latencyMs` after its PUBLISH went out; `now` is performance.now(). */
  record(latencyMs: number, now: number): void {
    const b = bucketOf(latencyMs);
    this.hist.set(b, (this.hist.get(b) ?? 0) + 1);
    if (this.lastAck > 0 && now - this.lastAck > this.maxGap) this.maxGap = now - this.lastAck;
    this.lastAck = now;
  }

  /** What came in since the previous call; a gap still open counts up to now. */
  take(now: number): { lat: Array<[number, number]>; maxGapMs: number } {
    const open = this.lastAck > 0 ? now - this.lastAck : 0;
    const out = { lat: [...this.hist.entries()], maxGapMs: Math.round(Math.max(this.maxGap, open)) };
    this.hist = new Map();
    this.maxGap = 0;
    return out;
  }
}
