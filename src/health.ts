// Readiness: should this instance get traffic? The database answers, this version's migrations
// are applied, the broker link is up, ingest is not stalled, and the service is not shutting
// down. GET /health/ready answers it (src/http/ops-routes.ts); the same checks are metrics
// (`health_ready`, `health_check_up{check}`), taken at each scrape, for the alert rules.
import client from 'prom-client';
import type pg from 'pg';
import type { IngestStatus } from './ingest/index.js';
import type { Metrics } from './metrics.js';

/** How long the database has to answer a readiness check. */
const DATABASE_TIMEOUT_MS = 2000;
/** SQLSTATE of a missing table: no migration was ever applied to this database. */
const UNDEFINED_TABLE = '42P01';

const CHECKS = ['database', 'migrations', 'broker', 'ingest'] as const;
export type CheckName = (typeof CHECKS)[number];

export interface ReadinessReport {
  ready: boolean;
  /** `ok`, or what is wrong, per check. */
  checks: Record<CheckName, string>;
  /** When not ready: one line per failing check, `shutting down` first during a shutdown. */
  reasons: string[];
}

export interface ReadinessOptions {
  pool: pg.Pool;
  /** The migration versions this build applies (sql/). */
  migrations: ReadonlyArray<{ version: number; name: string }>;
  ingest: () => IngestStatus;
  /** INGEST_STALL_SECONDS, in ms. */
  stallMs: number;
  metrics: Metrics;
}

export class Readiness {
  /** Set when the shutdown begins: from then on not ready. */
  draining = false;
  /** The check of the scrape under way: both gauges below read the same one (one database query per scrape). */
  private scraping: Promise<ReadinessReport> | undefined;
  /**
   * The database query of the checks, while it runs: every check waits for it (each at most
   * DATABASE_TIMEOUT_MS) instead of starting its own, so a hung database holds one pool
   * connection for the health checks, not one per probe until the pool is used up.
   */
  private querying: Promise<{ rows: Array<{ version: number }> }> | undefined;
  /** GET /health's `SELECT 1` while it runs, shared the same way. */
  private pinging: Promise<unknown> | undefined;

  constructor(private readonly opts: ReadinessOptions) {
    // prom-client collects the two gauges side by side: the first starts the check, the second
    // shares it, so a scrape holds at most one pool connection (a hung database holds each for
    // the statement timeout) and the two gauges agree.
    const check = () => (this.scraping ??= this.check().finally(() => (this.scraping = undefined)));
    new client.Gauge({
      name: 'health_ready',
      help: '1 when GET /health/ready answers 200 (database, migrations, broker link, ingest all ok, not shutting down), else 0',
      registers: [opts.metrics.registry],
      async collect() {
        this.set((await check()).ready ? 1 : 0);
      },
    });
    new client.Gauge({
      name: 'health_check_up',
      help: `Each readiness check of GET /health/ready: 1 ok, 0 failing (check: ${CHECKS.join(', ')})`,
      labelNames: ['check'] as const,
      registers: [opts.metrics.registry],
      async collect() {
        const report = await check();
        for (const name of CHECKS) this.labels(name).set(report.checks[name] === 'ok' ? 1 : 0);
      },
    });
  }

  async check(): Promise<ReadinessReport> {
    const { database, migrations } = await this.checkDatabase();
    const checks: Record<CheckName, string> = { database, migrations, broker: this.checkBroker(), ingest: this.checkIngest() };
    const reasons = CHECKS.filter((c) => checks[c] !== 'ok').map((c) => `${c}: ${checks[c]}`);
    if (this.draining) reasons.unshift('shutting down');
    return { ready: reasons.length === 0, checks, reasons };
  }

  /** GET /health: whether the database answers `SELECT 1` within DATABASE_TIMEOUT_MS. */
  async databaseAnswers(): Promise<boolean> {
    const ping = (this.pinging ??= this.opts.pool.query('SELECT 1').finally(() => (this.pinging = undefined)));
    return within(ping).then(
      () => true,
      () => false,
    );
  }

  /** One query answers both: the database is reachable, and which migrations it has. */
  private async checkDatabase(): Promise<{ database: string; migrations: string }> {
    try {
      const { rows } = await within(
        (this.querying ??= this.opts.pool
          .query<{ version: number }>('SELECT version FROM schema_migrations')
          .catch((err: unknown) => {
            // The database answered, but holds no migrations at all (a new or restored database).
            if ((err as { code?: unknown }).code === UNDEFINED_TABLE) return { rows: [] };
            throw err;
          })
          .finally(() => (this.querying = undefined))),
      );
      const applied = new Set(rows.map((r) => r.version));
      const missing = this.opts.migrations.filter((m) => !applied.has(m.version)).map((m) => m.name);
      return { database: 'ok', migrations: missing.length === 0 ? 'ok' : `not applied: ${missing.join(', ')}` };
    } catch (err) {
      return { database: `unreachable: ${(err as Error).message}`, migrations: 'unknown: the database did not answer' };
    }
  }

  private checkBroker(): string {
    const link = this.opts.ingest().link;
    if (!link) return 'down: the ingest router is not running';
    return link.up ? 'ok' : `down: ${link.connected} of ${link.connections} connections to the broker are up`;
  }

  private checkIngest(): string {
    const { pending, progressAt } = this.opts.ingest();
    const idleMs = Date.now() - progressAt;
    if (pending > 0 && idleMs > this.opts.stallMs)
      return `stalled: ${pending} messages wait, none acknowledged for ${Math.round(idleMs / 1000)} s`;
    return 'ok';
  }
}

/** `work`, or a rejection once DATABASE_TIMEOUT_MS has passed (the work goes on: callers share it). */
function within<T>(work: Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>(
    (_, reject) => (timer = setTimeout(() => reject(new Error(`no answer within ${DATABASE_TIMEOUT_MS / 1000} s`)), DATABASE_TIMEOUT_MS)),
  );
  return Promise.race([work, late]).finally(() => clearTimeout(timer));
}
