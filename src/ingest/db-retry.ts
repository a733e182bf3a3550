// A shard worker's patience with the database, shared by its registry reads and its history
// writes: an operation is retried with backoff until the database answers, so the shard stops
// acknowledging (its callers wait) and resumes by itself. An outage is logged once when it
// begins and once when it ends, whichever operation met it.
import type { Logger } from '../log.js';

const FIRST_DELAY_MS = 100;
const MAX_BACKOFF_MS = 5000;

export class DatabaseRetry {
  private outage: { since: number; error: string } | undefined;

  constructor(private readonly log: Logger) {}

  /** Runs `fn` until it succeeds, backing off while the database is unreachable. */
  async run<T>(what: string, fn: () => Promise<T>): Promise<T> {
    let delay = FIRST_DELAY_MS;
    for (;;) {
      try {
        const result = await fn();
        if (this.outage) {
          this.log.info('database reachable again; ingest resumed', { downMs: Date.now() - this.outage.since });
          this.outage = undefined;
        }
        return result;
      } catch (err) {
        if (!this.outage) {
          this.outage = { since: Date.now(), error: (err as Error).message };
          this.log.warn(`could not ${what}; retrying until the database is back`, { error: (err as Error).message });
        }
        await new Promise((r) => setTimeout(r, delay));
        delay = Math.min(delay * 2, MAX_BACKOFF_MS);
      }
    }
  }
}
