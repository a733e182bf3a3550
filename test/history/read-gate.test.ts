// The history read gate (src/history/read-gate.ts): open, every read runs at once; closed,
// held reads run one at a time, a burst of share x BURST_SECONDS of read time without rests,
// then the lane rests (100 / share - 1) times what each took; a paced reader within the share
// is not held for one slow read; a gate that opens lets the held reads go; too many held: 503.
// The gate's own policy, driven
// by a `closed` switch instead of a saturated host (what saturates it is measured in
// bench/history-readers.ts, docs/messaging.md §6).
import client from 'prom-client';
import { describe, expect, it } from 'vitest';
import { ApiError } from '../../src/errors.js';
import { BURST_SECONDS, ReadGate } from '../../src/history/read-gate.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Reads that record when they ran and how many ran at once; `ms` may vary per read (its index). */
function recorder(ms: number | ((i: number) => number)) {
  let running = 0;
  let most = 0;
  let started = 0;
  const spans: Array<{ start: number; end: number }> = [];
  const read = async () => {
    const start = performance.now();
    const i = started++;
    running++;
    most = Math.max(most, running);
    await sleep(typeof ms === 'number' ? ms : ms(i));
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

  it('closed: one read at a time; a burst of the budget without rests, then the lane rests so that reads take at most the share', async () => {
    const share = 10;
    const { gate: g, registry } = gate(share, () => true);
    const r = recorder(40);
    await Promise.all(Array.from({ length: 9 }, () => g.run(r.read)));
    expect(r.most()).toBe(1);
    const spans = [...r.spans].sort((a, b) => a.start - b.start);
    const gaps = spans.slice(1).map((s, i) => s.start - spans[i]!.end);
    // The burst: share x BURST_SECONDS (200 ms) of reads, earning 10 % while they run: reads of
    // ~40 ms cost ~36 each, so the first 5 or 6 run back to back.
    const burst = gaps.findIndex((gap) => gap > 20);
    const budget = (share / 100) * BURST_SECONDS * 1000;
    const spent = spans.slice(0, burst + 1).reduce((sum, s) => sum + (s.end - s.start), 0);
    expect(burst).toBeGreaterThanOrEqual(3);
    expect(spent * (1 - share / 100)).toBeLessThanOrEqual(budget + 100); // at most two reads past the budget
    // After the first rest the budget is spent: each read is followed by a rest of 9 x what it took.
    for (let i = burst + 1; i < gaps.length; i++) {
      const took = spans[i]!.end - spans[i]!.start;
      expect(gaps[i]).toBeGreaterThanOrEqual(took * (100 / share - 1) - 2); // timers may fire 1 ms early
    }
    expect(gaps.length - burst).toBeGreaterThanOrEqual(2);
    expect(await metric(registry, 'history_reads_held_total')).toBe(9);
  });

  it('closed: a paced reader within the share is not held, even after one slow read', async () => {
    // 10 %: 100 ms of reads a second; one 20-ms read every 250 ms is 80, and one read of 150 ms
    // (which alone would earn a rest of 1.35 s) is paid from the burst.
    const { gate: g } = gate(10, () => true);
    const r = recorder((i) => (i === 2 ? 150 : 20));
    const t0 = performance.now();
    const lateBy: number[] = [];
    for (let i = 0; i < 8; i++) {
      const due = t0 + i * 250;
      await sleep(Math.max(0, due - performance.now()));
      const asked = performance.now();
      await g.run(async () => {
        lateBy.push(performance.now() - asked);
        return r.read();
      });
    }
    expect(Math.max(...lateBy)).toBeLessThan(15);
  });

  it('a gate that opens lets its held reads go without waiting out the rest', async () => {
    let closed = true;
    const { gate: g } = gate(1, () => closed);
    const r = recorder(50);
    const t0 = performance.now();
    const all = Promise.all(Array.from({ length: 4 }, () => g.run(r.read)));
    await sleep(120);
    expect(r.spans).toHaveLength(1); // the first ran (the 20-ms budget of 1 %); the lane now rests ~3 s
    closed = false;
    await all;
    // Without the opening the last read would start ~13 s in (rests of ~3 and ~5 s).
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
