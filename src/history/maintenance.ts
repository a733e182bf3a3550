// Housekeeping of the history table, run by the main thread at start and then periodically:
// on plain PostgreSQL it creates the partitions of the previous, current and next two chunk
// intervals ahead of time (workers create others on demand) and drops whole partitions older
// than HISTORY_RETENTION_DAYS; on TimescaleDB it sets the retention policy once at start
// (TimescaleDB creates and drops chunks itself). All of it goes through the SQL functions of
// sql/020_history.sql.
import type pg from 'pg';
import type { Logger } from '../log.js';

export interface HistoryMaintenance {
  timescale: boolean;
  /** One maintenance pass (also run by the timer). */
  runOnce(): Promise<void>;
  stop(): void;
}

export async function startHistoryMaintenance(opts: {
  pool: pg.Pool;
  chunkInterval: string;
  retentionDays: number | undefined;
  log: Logger;
}): Promise<HistoryMaintenance> {
  const { pool, log } = opts;
  const { rows } = await pool.query<{ timescale: boolean; secs: number; same: boolean }>(
    `SELECT timescale, extract(epoch FROM chunk_interval)::float8 AS secs, history_set_chunk_interval($1::interval) AS same FROM history_settings`,
    [opts.chunkInterval],
  );
  const settings = rows[0]!;
  if (!settings.same) {
    log.warn(
      'HISTORY_CHUNK_INTERVAL differs from the interval the history partitions were laid out with; the partitions keep their interval',
      {
        configured: opts.chunkInterval,
        inUseSeconds: settings.secs,
      },
    );
  }
  const retention = opts.retentionDays ?? null;
  const runOnce = async () => {
    await pool.query(`SELECT history_ensure_partition(now() + s.chunk_interval * g) FROM history_settings s, generate_series(-1, 2) AS g`);
    if (!settings.timescale) {
      const res = await pool.query<{ dropped: number }>('SELECT history_apply_retention($1::int) AS dropped', [retention]);
      const dropped = res.rows[0]?.dropped ?? 0;
      if (dropped > 0) log.info('history retention dropped expired partitions', { partitions: dropped, retentionDays: retention });
    }
  };
  if (settings.timescale) await pool.query('SELECT history_apply_retention($1::int)', [retention]);
  await runOnce();
  const everyMs = Math.min(settings.secs / 4, 3600) * 1000;
  const timer = setInterval(() => {
    runOnce().catch((err: Error) => log.warn('history maintenance failed; trying again later', { error: err.message }));
  }, everyMs);
  timer.unref();
  return { timescale: settings.timescale, runOnce, stop: () => clearInterval(timer) };
}
