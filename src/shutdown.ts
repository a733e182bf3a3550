// The shutdown's time budget (SHUTDOWN_TIMEOUT_MS), shared by the parts that stop: HTTP requests
// in flight and the ingest flush drain side by side until `drainUntil`; what is left of the
// budget is kept for closing the broker link, the database pool and the embedded PostgreSQL.

export interface ShutdownClock {
  /** Epoch ms: requests in flight and the ingest flush get until then. */
  readonly drainUntil: number;
  /** Epoch ms: everything is stopped by then. */
  readonly deadline: number;
}

/** Kept for closing after the drain: a quarter of the budget, at most 2 s. */
const CLOSING_SHARE = 4;
const CLOSING_MAX_MS = 2000;
/**
 * Kept for the exit itself after the last step (the final log lines, ending the worker threads,
 * the process's teardown): measured 30–40 ms on a quiet machine and over 120 ms on a loaded one.
 */
const EXIT_MARGIN_MS = 400;
const EXIT_SHARE = 8;

export function shutdownClock(timeoutMs: number, now = Date.now()): ShutdownClock {
  const closing = Math.min(CLOSING_MAX_MS, Math.floor(timeoutMs / CLOSING_SHARE));
  const exit = Math.min(EXIT_MARGIN_MS, Math.floor(timeoutMs / EXIT_SHARE));
  return { drainUntil: now + timeoutMs - closing, deadline: now + timeoutMs - exit };
}

/** `work`, or nothing once `until` (epoch ms) has passed: a step that hangs does not hold up the shutdown. */
export function until<T>(work: Promise<T>, until: number): Promise<T | undefined> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<undefined>((resolve) => (timer = setTimeout(() => resolve(undefined), Math.max(0, until - Date.now()))));
  return Promise.race([work, late]).finally(() => clearTimeout(timer));
}
