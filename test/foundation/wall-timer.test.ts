// atTime (src/wall-timer.ts): a token or credential that expires in a month fires then, not
// after the 24.8 days at which a Node timer gives up waiting (nor at once, as Node runs a timer
// it cannot hold). Fake clock: a month cannot be waited for.
import { afterEach, describe, expect, it, vi } from 'vitest';
import { MAX_TIMER_MS, atTime } from '../../src/wall-timer.js';

const DAY = 86_400_000;

describe('atTime', () => {
  afterEach(() => vi.useRealTimers());

  it('fires at its time of day, however far ahead, and never before', () => {
    vi.useFakeTimers();
    const start = Date.now();
    const fired: number[] = [];
    atTime(start + 30 * DAY, () => fired.push(Date.now() - start));
    vi.advanceTimersByTime(MAX_TIMER_MS + 1000); // one of Node's longest timers has run out
    expect(fired).toEqual([]);
    vi.advanceTimersByTime(30 * DAY);
    expect(fired).toEqual([30 * DAY]);
  });

  it('fires at once for a time already past, and not at all once cancelled', () => {
    vi.useFakeTimers();
    const fired: string[] = [];
    atTime(Date.now() - 1000, () => fired.push('past'));
    const t = atTime(Date.now() + DAY, () => fired.push('cancelled'));
    t.cancel();
    vi.advanceTimersByTime(2 * DAY);
    expect(fired).toEqual(['past']);
  });
});
