// A timer for a time of day, however far ahead: Node runs a timer of more than 2^31 - 1 ms
// (24.8 days) at once, so a longer wait is taken in steps, each checked against the clock.
// Used for token and credential expiry, which may be a year away.

/** The longest delay Node's timers take as given. */
export const MAX_TIMER_MS = 2 ** 31 - 1;

export interface WallTimer {
  cancel(): void;
}

/** Calls `fn` once the clock reads `atMs` (ms since the epoch) or later. Does not keep the process alive. */
export function atTime(atMs: number, fn: () => void): WallTimer {
  let timer: NodeJS.Timeout;
  const arm = () => {
    timer = setTimeout(() => (Date.now() < atMs ? arm() : fn()), Math.min(MAX_TIMER_MS, Math.max(0, atMs - Date.now())));
    timer.unref();
  };
  arm();
  return { cancel: () => clearTimeout(timer) };
}
