// Latency histograms counted where the time is known (the shard workers know when a batch
// committed, the router thread when a message was acknowledged) and added up in the main
// thread's registry (src/metrics.ts CountedHistogram): per message, without sending one number
// per message across threads.

/** Upper bounds (seconds) of the ingest latency histograms: from one batch interval to a database outage. */
export const LATENCY_BUCKETS: readonly number[] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];

/** Counts per bucket (the last one: above every bound) and the sum of the observed seconds. */
export interface LatencyCounts {
  counts: number[];
  sum: number;
}

export const emptyLatency = (): LatencyCounts => ({ counts: new Array<number>(LATENCY_BUCKETS.length + 1).fill(0), sum: 0 });

/** One message's latency: from its arrival (`receivedUs`, µs since the epoch) to now. */
export function observeSince(into: LatencyCounts, receivedUs: number, nowMs = Date.now()): void {
  const seconds = Math.max(0, nowMs / 1000 - receivedUs / 1e6);
  let i = 0;
  while (i < LATENCY_BUCKETS.length && seconds > LATENCY_BUCKETS[i]!) i++;
  into.counts[i]!++;
  into.sum += seconds;
}

export function addLatency(into: LatencyCounts, from: LatencyCounts): void {
  for (let i = 0; i < into.counts.length; i++) into.counts[i]! += from.counts[i]!;
  into.sum += from.sum;
}
