// The V8 heap settings of docs/operations.md §3 "Memory": an ingest thread's young generation
// is what INGEST_THREAD_YOUNG_GENERATION_MB says (V8's default when 0), seen from inside a real
// thread that churns through short-lived objects until its young generation is at its largest.
import { Worker } from 'node:worker_threads';
import { describe, expect, it } from 'vitest';
import { ingestThreadLimits } from '../../src/v8-heap.js';

const CHURN = `
const v8 = require('node:v8');
let keep = [];
for (let i = 0; i < 3e6; i++) { keep.push({ a: i, b: [i] }); if (keep.length > 2e5) keep = []; }
const space = v8.getHeapSpaceStatistics().find((s) => s.space_name === 'new_space');
require('node:worker_threads').parentPort.postMessage(space.space_size / 1048576);
`;

/** The young generation's semi-spaces (new space) of a thread started with `limits`, MB, once grown. */
async function newSpaceMb(youngGenerationMb: number): Promise<number> {
  const w = new Worker(CHURN, { eval: true, resourceLimits: ingestThreadLimits(youngGenerationMb) });
  try {
    return await new Promise<number>((resolve, reject) => {
      w.once('message', resolve);
      w.once('error', reject);
    });
  } finally {
    await w.terminate();
  }
}

describe('V8 heap settings of the ingest threads', () => {
  it('INGEST_THREAD_YOUNG_GENERATION_MB=24 (the default) holds the new space to 16 MB; 0 leaves V8 its 32 MB', async () => {
    expect(await newSpaceMb(24)).toBeLessThanOrEqual(16);
    expect(await newSpaceMb(0)).toBeGreaterThan(16);
  });
});
