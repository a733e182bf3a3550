// The COPY turn shared by the shard workers: one holder at a time, handed on when given back,
// and taken anyway from a holder that never gives it back (a crashed worker).
import { describe, expect, it } from 'vitest';
import { CopyTurn } from '../../src/ingest/copy-turn.js';

describe('CopyTurn', () => {
  it('lets one taker in at a time and hands the turn on when it is given back', async () => {
    const shared = CopyTurn.shared();
    const a = new CopyTurn(shared, 1);
    const b = new CopyTurn(shared, 2);
    await a.take();
    let bIn = false;
    const waiting = b.take().then(() => (bIn = true));
    await new Promise((r) => setTimeout(r, 50));
    expect(bIn).toBe(false);
    a.give();
    await waiting;
    expect(bIn).toBe(true);
    // a give by a non-holder changes nothing
    a.give();
    let aIn = false;
    const aWaits = a.take().then(() => (aIn = true));
    await new Promise((r) => setTimeout(r, 50));
    expect(aIn).toBe(false);
    b.give();
    await aWaits;
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
});
