// The history read gate (src/history/read-gate.ts): open, every read runs at once; closed,
// held reads run one at a time and the lane rests (100 / share - 1) times what each took; a
// gate that opens lets the held reads go; too many held: 503. The gate's own policy, driven
// by a `closed` switch instead of a saturated host (what saturates it is measured in
// bench/history-readers.ts, docs/messaging.md §6).
import client from 'prom-client';
import { describe, expect, it } from 'vitest';
import { ApiError } from '../../src/errors.js';
import { ReadGate } from '../../src/history/read-gate.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Reads that record when they ran and how many ran at once. */
function recorder(ms: number) {
  let running = 0;
  let most = 0;
  const spans: Array<{ start: number; end: number }> = [];
  const read = async () => {
    const start = performance.now();
    running++;
    most = Math.max(most, running);
    await sleep(ms);
    running--;
    spans.push({ start, end: performance.now() });
    return spans.length;
  };
  return { read, spans, most: () => most };
}

function gate(sharePercent: number, closed: () => boolean, maxWaiting = 100) {
  const registry = new client.Registry();
  return { gate: new ReadGate({ sharePercent, closed, maxWaiting, registry }), registry };
}

async function metric(registry: client.Registry, name: string): Promise<number> {
  const m = (await registry.getMetricsAsJSON()).find((x) => x.name === name);
  return Number((m?.values[0] as { value: number } | undefined)?.value ?? NaN);
}

describe('the history read gate', () => {
  it.each([
    ['open (CPU to spare): reads run at once, together, none held', 10, false],
    ['HISTORY_READ_SHARE_PERCENT=100: never held, even when the host is saturated', 100, true],
  ] as const)('%s', async (_name, share, closed) => {
    const { gate: g, registry } = gate(share, () => closed);
    const r = recorder(30);
    await Promise.all(Array.from({ length: 5 }, () => g.run(r.read)));
    expect(r.most()).toBe(5);
    expect(await metric(registry, 'history_reads_held_total')).toBe(0);
  });

  it('closed: one read at a time, and the lane rests so that reads take at most the share of the time', async () => {
    const { gate: g, registry } = gate(50, () => true);
    const r = recorder(40);
    const t0 = performance.now();
    await Promise.all(Array.from({ length: 4 }, () => g.run(r.read)));
    expect(r.most()).toBe(1);
    const spans = [...r.spans].sort((a, b) => a.start - b.start);
    for (let i = 1; i < spans.length; i++) {
      const took = spans[i - 1]!.end - spans[i - 1]!.start;
      // share 50 %: the rest after a read is as long as the read (timers may fire 1 ms early).
      expect(spans[i]!.start - spans[i - 1]!.end).toBeGreaterThanOrEqual(took - 2);
    }
    expect(performance.now() - t0).toBeGreaterThanOrEqual(4 * 40 + 3 * 40 - 8);
    expect(await metric(registry, 'history_reads_held_total')).toBe(4);
  });

  it('a gate that opens lets its held reads go without waiting out the rest', async () => {
    let closed = true;
    const { gate: g } = gate(1, () => closed);
    const r = recorder(50);
    const t0 = performance.now();
    const all = Promise.all(Array.from({ length: 4 }, () => g.run(r.read)));
    await sleep(120);
    expect(r.spans).toHaveLength(1); // the first ran; the lane now rests 99 x 50 ms
    closed = false;
    await all;
    // Without the opening the last read would start ~15 s in (3 rests of ~5 s).
    expect(performance.now() - t0).toBeLessThan(3000);
  });

  it('too many held: 503, and the waiting gauge counts the held reads', async () => {
    const { gate: g, registry } = gate(10, () => true, 2);
    const r = recorder(40);
    const taken = [g.run(r.read), g.run(r.read), g.run(r.read)]; // one on the lane, two held
    await sleep(5);
    expect(await metric(registry, 'history_reads_waiting')).toBe(2);
    const refused = await g.run(r.read).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(ApiError);
    expect((refused as ApiError).httpStatus).toBe(503);
    g.stop(); // the service stops: what waits runs now
    await Promise.all(taken);
    expect(r.spans).toHaveLength(3);
  });
});
