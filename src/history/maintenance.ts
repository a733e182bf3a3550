// Housekeeping of the history table, run by the main thread at start and then periodically:
//   * on plain PostgreSQL it creates the partitions of the previous (unless expired), current and next two chunk
//     intervals ahead of time (workers create others on demand) and drops whole partitions
//     older than HISTORY_RETENTION_DAYS; on TimescaleDB it sets the retention policy once at
//     start (TimescaleDB creates and drops chunks itself), except on the Apache-only build,
//     which has none: there it drops expired chunks at start and at every pass;
//   * on both, it moves the start of the open region to the start of the previous chunk
//     (sql/022_history_closed_spans.sql): reads then plan the open chunks only, and find older
//     rows through the series' spans;
//   * at start and whenever a chunk completes, it warns when the chunk interval makes the
//     current chunk's index larger than shared_buffers (src/history/sizing.ts);
//   * every ROLLUP_EVERY_MS, it rolls up the hours that ended ROLLUP_LAG_MINUTES ago and computes
//     again the hours late rows landed in (sql/070_history_rollup.sql), for aggregate reads.
// All of it goes through the SQL functions of sql/020_history.sql and sql/022_*.sql.
import type pg from 'pg';
import { inTransaction } from '../db/pool.js';
import type { Logger } from '../log.js';
import { forgetHorizon } from './horizon.js';
import { checkChunkSizing } from './sizing.js';

/**
 * How long a housekeeping statement waits for a lock (ACCESS EXCLUSIVE on history and its
 * partitions: a row trigger written again, a partition created or dropped) before it gives up
 * until the next pass. Every later reader of a partition waits behind such a statement, and an
 * export holds its ACCESS SHARE locks for as long as it streams (unbounded, docs/messaging.md
 * §6): unbounded, the wait held up every history read of the open region until the export ended
 * or the statement timeout (60 s by default) cut it.
 */
export const HOUSEKEEPING_LOCK_TIMEOUT_MS = 1000;

/**
 * Most partitions retention drops in one transaction: each holds ~8 entries of PostgreSQL's
 * shared lock table until the commit (max_locks_per_transaction x max_connections entries, 6,400
 * by default, for every session), and history's exclusive lock is held while they go.
 */
const RETENTION_STEP = 50;

/** SQLSTATE of a lock wait that ended at lock_timeout. */
const LOCK_NOT_AVAILABLE = '55P03';

/** `text` alone in a transaction whose lock waits end after HOUSEKEEPING_LOCK_TIMEOUT_MS (a lock timeout is not retried). */
function withBriefLocks<R extends pg.QueryResultRow>(pool: pg.Pool, text: string, values: unknown[]): Promise<pg.QueryResult<R>> {
  return inTransaction(pool, async (client) => {
    await client.query(`SET LOCAL lock_timeout = ${HOUSEKEEPING_LOCK_TIMEOUT_MS}`);
    return client.query<R>(text, values);
  });
}

/** How long after an hour ends it is rolled up: rows of devices whose clocks lag arrive first (also ingest's late-row bound, history-writer.ts). */
export const ROLLUP_LAG_MINUTES = 5;
const ROLLUP_EVERY_MS = 5 * 60_000;
/** Most hours per transaction when a long history is rolled up the first time. */
const ROLLUP_STEP = '1 day';
/** Most marked hours computed again per transaction (each read by its own index range scan; 1,000 hours of 1 Hz rows are ~3.6 million rows). */
const REFRESH_MOST = 1_000;

export interface HistoryMaintenance {
  timescale: boolean;
  /** One maintenance pass (also run by the timer). */
  runOnce(): Promise<void>;
  /** The timer's period: min(chunk interval in use / 4, 1 h), in ms. */
  everyMs: number;
  /** One rollup pass (also run by its timer). */
  rollUp(): Promise<void>;
  stop(): void;
}

interface LayoutSettings {
  timescale: boolean;
  /** The chunk interval in use, in seconds. */
  secs: number;
  /** Whether the service applies HISTORY_RETENTION_DAYS (else a TimescaleDB retention policy). */
  byService: boolean;
  /** Whether the interval in use is HISTORY_CHUNK_INTERVAL. */
  same: boolean;
}

/**
 * Applies HISTORY_CHUNK_INTERVAL where it can (TimescaleDB: to new chunks; plain partitions keep
 * the interval they were laid out with) and reads the settings in use; warns when they differ.
 */
async function readLayoutSettings(pool: pg.Pool, chunkInterval: string, log: Logger): Promise<LayoutSettings> {
  // Two statements: a SELECT that calls history_set_chunk_interval reads history_settings as
  // they were before the call, so on TimescaleDB the first start with a changed interval ran
  // the maintenance timer at the old interval's pace (found by an audit: 1 day changed to
  // 1 hour, the open region moved once an hour instead of every 15 minutes).
  const { rows: changed } = await pool.query<{ same: boolean }>('SELECT history_set_chunk_interval($1::interval) AS same', [chunkInterval]);
  // Who applies HISTORY_RETENTION_DAYS: the service at every pass (plain PostgreSQL, and
  // TimescaleDB's Apache-only build, which has no retention policy: before an audit, there only
  // at start), or a TimescaleDB retention policy set once at start.
  const { rows } = await pool.query<{ timescale: boolean; secs: number; byService: boolean }>(
    'SELECT timescale, extract(epoch FROM chunk_interval)::float8 AS secs, history_retention_by_service() AS "byService" FROM history_settings',
  );
  const settings = { ...rows[0]!, same: changed[0]!.same };
  if (!settings.same) {
    log.warn(
      'HISTORY_CHUNK_INTERVAL differs from the interval the history partitions were laid out with; the partitions keep their interval',
      {
        configured: chunkInterval,
        inUseSeconds: settings.secs,
      },
    );
  }
  return settings;
}

/** Warns when the chunk interval makes the current chunk's index larger than shared_buffers (src/history/sizing.ts). */
async function warnChunkSizing(pool: pg.Pool, log: Logger, settings: LayoutSettings, configured: string): Promise<void> {
  const advice = await checkChunkSizing(pool);
  if (!advice) return;
  const mb = (bytes: number) => Math.round(bytes / 1048576);
  log.warn(
    "HISTORY_CHUNK_INTERVAL makes the current chunk's index larger than shared_buffers: ingest and recent reads slow down once it is; shorten the interval or raise shared_buffers",
    {
      // The layout's interval (a changed HISTORY_CHUNK_INTERVAL keeps it, warned at start), and the configured one if it differs.
      chunkInterval: advice.interval,
      ...(settings.same ? {} : { configured }),
      predictedIndexMB: mb(advice.predictedBytes),
      sharedBuffersMB: mb(advice.sharedBuffersBytes),
      suggestedInterval: advice.suggested ?? 'none fits: raise shared_buffers',
    },
  );
}

/**
 * Rollups up to the start of the hour that ended ROLLUP_LAG_MINUTES ago (late rows before it
 * noted first), then the hours marked by late rows, then (with retention) those whose rows
 * are gone. Each step is a transaction of its own; one pass at a time.
 */
async function rollUpOnce(pool: pg.Pool, retention: number | null, stopped: () => boolean): Promise<void> {
  const { rows } = await pool.query<{ t: Date; behind: boolean }>(
    `SELECT t, t > rolled_before AS behind
       FROM (SELECT date_bin(interval '1 hour', now() - interval '${ROLLUP_LAG_MINUTES} minutes', timestamptz 'epoch') AS t, rolled_before
               FROM history_settings) x`,
  );
  const { t, behind } = rows[0]!;
  if (behind) {
    await withBriefLocks(pool, 'SELECT history_rollup_note_before($1::timestamptz)', [t]);
    for (;;) {
      if (stopped()) return;
      const r = await pool.query<{ to: Date }>(`SELECT history_rollup_advance($1::timestamptz, interval '${ROLLUP_STEP}') AS to`, [t]);
      if (r.rows[0]!.to.getTime() >= t.getTime()) break;
    }
  }
  while (!stopped() && (await pool.query<{ n: number }>('SELECT history_rollup_refresh($1::int) AS n', [REFRESH_MOST])).rows[0]!.n > 0);
  if (retention !== null && !stopped()) await pool.query('SELECT history_rollup_forget_expired()');
}

export async function startHistoryMaintenance(opts: {
  pool: pg.Pool;
  chunkInterval: string;
  retentionDays: number | undefined;
  log: Logger;
}): Promise<HistoryMaintenance> {
  const { pool, log } = opts;
  const settings = await readLayoutSettings(pool, opts.chunkInterval, log);
  const retention = opts.retentionDays ?? null;
  let stopped = false;

  const checkSizing = () => warnChunkSizing(pool, log, settings, opts.chunkInterval);
  const failed = (err: Error) => log.warn('history maintenance failed; trying again later', { error: err.message });

  /**
   * Moves the open region's start to the start of the previous chunk: first the trigger notes
   * late rows before it, then the spans of the rows before it are written (two transactions,
   * in this order; sql/022_history_closed_spans.sql). Returns whether it moved.
   */
  const close = async (): Promise<boolean> => {
    const { rows: target } = await pool.query<{ t: Date; moves: boolean }>(
      `SELECT t, t > closed_before AS moves
         FROM (SELECT to_timestamp((floor(extract(epoch FROM now()) / s) - 1) * s) AS t, closed_before
                 FROM (SELECT extract(epoch FROM chunk_interval) AS s, closed_before FROM history_settings) x) y`,
    );
    if (!target[0]!.moves || stopped) return false;
    const t = target[0]!.t;
    await withBriefLocks(pool, 'SELECT history_note_before($1::timestamptz)', [t]);
    const started = Date.now();
    const res = await pool.query<{ n: number }>('SELECT history_close_before($1::timestamptz) AS n', [t]);
    forgetHorizon(pool); // this instance's reads use the new horizon at once (others within 5 s)
    log.info('history open region moved', { closedBefore: t.toISOString(), seriesSpans: res.rows[0]!.n, ms: Date.now() - started });
    return true;
  };

  /**
   * Partitions ahead (plain) and retention where the service applies it. The partitions are
   * waited for at start (its lock waits bounded by the statement timeout only: attaching one
   * conflicts with no reader or writer, sql/150_history_partitions_attached.sql), later their
   * lock waits are brief. Dropping one takes history's ACCESS EXCLUSIVE lock, behind which every
   * read and COPY of history queues, on every instance: its lock waits are brief at start too,
   * and a start whose drop gave up starts all the same (the next pass drops). Before (found by
   * an audit), a start's drop waited for another instance's export: that instance's reads and
   * ingest waited with it, and past the statement timeout the start failed.
   */
  const housekeep = async (atStart = false) => {
    // Not the previous chunk once retention has expired it (a retention shorter than a chunk):
    // it was made and dropped again at every pass (found by an audit).
    const ensure = `SELECT history_ensure_partition(now() + s.chunk_interval * g)
                      FROM history_settings s, generate_series(-1, 2) AS g
                     WHERE g >= 0 OR $1::int IS NULL
                        OR to_timestamp(floor(extract(epoch FROM now()) / extract(epoch FROM s.chunk_interval)) * extract(epoch FROM s.chunk_interval))
                           > now() - $1::int * interval '1 day'`;
    await (atStart ? pool.query(ensure, [retention]) : withBriefLocks(pool, ensure, [retention]));
    if (settings.byService) {
      // RETENTION_STEP partitions a transaction (sql/160_history_retention_in_steps.sql), until fewer come back.
      let dropped = 0;
      for (;;) {
        const res = await withBriefLocks<{ dropped: number }>(pool, 'SELECT history_apply_retention($1::int, $2::int) AS dropped', [
          retention,
          RETENTION_STEP,
        ]).catch((err: Error & { code?: string }) => {
          if (!atStart || err.code !== LOCK_NOT_AVAILABLE) throw err;
          failed(err);
          return undefined;
        });
        const n = res?.rows[0]?.dropped ?? 0;
        dropped += n;
        if (n < RETENTION_STEP || stopped) break;
      }
      if (dropped > 0) log.info('history retention dropped expired partitions', { partitions: dropped, retentionDays: retention });
    }
  };
  const runOnce = async () => {
    await housekeep();
    if (await close()) await checkSizing();
  };

  /** The rollup pass running, if one is: rollUp joins it (one pass at a time). */
  let rolling: Promise<void> | undefined;
  const rollUp = () => {
    rolling ??= rollUpOnce(pool, retention, () => stopped).finally(() => (rolling = undefined));
    return rolling;
  };

  if (!settings.byService) await pool.query('SELECT history_apply_retention($1::int)', [retention]);
  await housekeep(true);
  await checkSizing().catch(failed);
  // Moving the open region is not waited for: on a database upgraded with a long history, the
  // first spans are written from every row before the horizon, which may take a while.
  void close().catch(failed);
  void rollUp().catch(failed);
  const everyMs = Math.min(settings.secs / 4, 3600) * 1000;
  const timer = setInterval(() => void runOnce().catch(failed), everyMs);
  timer.unref();
  const rollupTimer = setInterval(() => void rollUp().catch(failed), ROLLUP_EVERY_MS);
  rollupTimer.unref();
  return {
    timescale: settings.timescale,
    runOnce,
    everyMs,
    rollUp,
    stop: () => {
      stopped = true;
      clearInterval(timer);
      clearInterval(rollupTimer);
    },
  };
}
