// V8 heap settings that keep the process's resident memory bounded under ingest load (issue 19;
// docs/operations.md §3 "Memory"). Measured: with V8's defaults an ingest thread's old generation
// grew to 3-4x its live data between full collections under a high allocation rate (every
// message waiting for its commit survives the young generation), and each thread kept a 48 MB
// young generation; both together held ~250 MB more resident at 10,000 msg/s.
import v8 from 'node:v8';
import type { ResourceLimits } from 'node:worker_threads';

/**
 * Grow every thread's heap by a fixed `percent` between full collections instead of V8's adaptive
 * factor (up to 4x). Process-wide; call before the threads start. 0 leaves V8's own.
 */
export function applyHeapGrowing(percent: number): void {
  if (percent > 0) v8.setFlagsFromString(`--heap-growing-percent=${percent}`);
}

/** The resource limits of an ingest thread (the router thread, the shard workers): its young generation; 0 leaves V8's default. */
export function ingestThreadLimits(youngGenerationMb: number): ResourceLimits | undefined {
  return youngGenerationMb > 0 ? { maxYoungGenerationSizeMb: youngGenerationMb } : undefined;
}
