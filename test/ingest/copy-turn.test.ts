// The COPY turn shared by the shard workers: one holder at a time, handed on when given back,
// and taken anyway from a holder that never gives it back (a crashed worker).
import { describe, expect, it } from 'vitest';
import { CopyTurn } from '../../src/ingest/copy-turn.js';

/** Starts `take()` and reports, after a moment, whether it got in. */
async function tryTake(turn: CopyTurn): Promise<{ inNow: boolean; taken: Promise<void> }> {
  let got = false;
  const taken = turn.take().then(() => void (got = true));
  await new Promise((r) => setTimeout(r, 50));
  return { inNow: got, taken };
}

describe('CopyTurn', () => {
  it('lets one taker in at a time and hands the turn on when it is given back', async () => {
    const shared = CopyTurn.shared();
    const a = new CopyTurn(shared, 1);
    const b = new CopyTurn(shared, 2);
    await a.take();
    const bTry = await tryTake(b);
    expect(bTry.inNow).toBe(false);
    a.give();
    await bTry.taken;
    // a give by a non-holder changes nothing
    a.give();
    const aTry = await tryTake(a);
    expect(aTry.inNow).toBe(false);
    b.give();
    await aTry.taken;
    a.give();
  });

  it('takes the turn from a holder that keeps it past the steal time', async () => {
    const shared = CopyTurn.shared();
    const crashed = new CopyTurn(shared, 7, 100);
    const next = new CopyTurn(shared, 8, 100);
    await crashed.take();
    const started = performance.now();
    await next.take();
    expect(performance.now() - started).toBeGreaterThanOrEqual(90);
    // the thief holds it now: the old holder's give does not free it
    crashed.give();
    expect(new Int32Array(shared)[0]).toBe(8);
    next.give();
    expect(new Int32Array(shared)[0]).toBe(0);
  });
  it("is free at once when the pool releases a dead holder's mark", async () => {
    const shared = CopyTurn.shared();
    const dead = new CopyTurn(shared, 5);
    const alive = new CopyTurn(shared, 6);
    await dead.take();
    const waiting = await tryTake(alive);
    expect(waiting.inNow).toBe(false);
    expect(CopyTurn.releaseFrom(shared, 6)).toBe(false); // not the holder: nothing changes
    expect(CopyTurn.releaseFrom(shared, 5)).toBe(true);
    await waiting.taken;
    alive.give();
  });

  it('is fair: a taker that gives the turn back and asks again at once lets one waiting for 200 ms go first', async () => {
    const shared = CopyTurn.shared();
    const turns = { 1: 0, 2: 0 };
    let longestWait = 0;
    let running = true;
    // Two shard workers, each with a 20 ms COPY always ready: give and take again in one tick.
    const worker = async (mark: 1 | 2) => {
      const turn = new CopyTurn(shared, mark);
      while (running) {
        const asked = performance.now();
        await turn.take();
        longestWait = Math.max(longestWait, performance.now() - asked);
        turns[mark]++;
        await new Promise((r) => setTimeout(r, 20));
        turn.give();
      }
    };
    const both = Promise.all([worker(1), worker(2)]);
    await new Promise((r) => setTimeout(r, 2000));
    running = false;
    await both;
    // Without the waiting slots the first taker kept the turn: 2 got none in 2 s (it polls once
    // a second and lost each time). Now each waits about 200 ms and a COPY at most.
    expect(Math.min(turns[1], turns[2])).toBeGreaterThanOrEqual((turns[1] + turns[2]) / 4);
    expect(longestWait).toBeLessThan(600);
  });

  it('a dead waiter is forgotten: the others do not let it go first', async () => {
    const shared = CopyTurn.shared();
    const holder = new CopyTurn(shared, 1);
    const dead = new CopyTurn(shared, 2);
    await holder.take();
    void dead.take(); // announces itself, then its worker dies
    await new Promise((r) => setTimeout(r, 20));
    CopyTurn.releaseFrom(shared, 2);
    holder.give();
    const started = performance.now();
    await holder.take();
    expect(performance.now() - started).toBeLessThan(50);
    holder.give();
  });
});
