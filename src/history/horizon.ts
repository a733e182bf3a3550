// Where the history's open region starts (sql/022_history_closed_spans.sql): rows at or after
// `closedUs` are read with that time as a literal bound, rows before it through the series'
// spans. Read from history_settings and kept a few seconds per pool: the boundary moves once a
// chunk interval, and a value older than the database's is always safe (spans cover every row
// before the database's boundary, so also before an older one), only slower for a while.
import type pg from 'pg';

export interface Horizon {
  /** The open region's start, µs since the epoch; -Infinity before the first close. */
  closedUs: number;
  /** The chunk interval in µs: the first window of a walk through the closed region. */
  chunkUs: number;
  /**
   * Where the oldest chunk starts, µs; undefined: there is no chunk (nothing is stored). A few
   * seconds old at most, like the rest: a walk that would skip rows by it reads it afresh
   * (oldestChunkUs), and the rollups of hours before it are left out (their rows are read).
   */
  oldestUs: number | undefined;
  /**
   * From where the hourly rollups may answer, µs (undefined: nowhere): the oldest chunk's start,
   * and on TimescaleDB not before its retention policy's cut, since the policy drops chunks on
   * its own schedule and a late row may make a dropped chunk again before the rollup pass
   * forgets its hours (sql/140_history_rollups_from_retention.sql).
   */
  rollupsFromUs: number | undefined;
}

/** How long a read horizon is used before it is read again. */
const REFRESH_MS = 5000;

interface Cached {
  value: Horizon;
  readAt: number;
  reading: Promise<Horizon> | undefined;
}

const cache = new WeakMap<pg.Pool, Cached>();

async function read(pool: pg.Pool): Promise<Horizon> {
  const { rows } = await pool.query<{ closed_us: string | null; chunk_us: number; oldest_us: string | null; rollups_us: string | null }>({
    name: 'history-horizon',
    text: `SELECT CASE WHEN closed_before = '-infinity' THEN NULL ELSE (extract(epoch FROM closed_before) * 1000000)::int8::text END AS closed_us,
                  (extract(epoch FROM chunk_interval) * 1000000)::float8 AS chunk_us,
                  (extract(epoch FROM history_oldest_chunk_start()) * 1000000)::int8::text AS oldest_us,
                  (extract(epoch FROM history_rollups_from()) * 1000000)::int8::text AS rollups_us
             FROM history_settings`,
  });
  const row = rows[0]!;
  return {
    closedUs: row.closed_us === null ? -Infinity : Number(row.closed_us),
    chunkUs: row.chunk_us,
    oldestUs: row.oldest_us === null ? undefined : Number(row.oldest_us),
    rollupsFromUs: row.rollups_us === null ? undefined : Number(row.rollups_us),
  };
}

/**
 * Where the oldest chunk starts now (µs; undefined: there is none), read afresh: a walk that
 * would skip rows by the cached value asks this first, since a late row may have made an older
 * chunk since the horizon was read.
 */
export async function oldestChunkUs(pool: pg.Pool): Promise<number | undefined> {
  const { rows } = await pool.query<{ us: string | null }>(
    'SELECT (extract(epoch FROM history_oldest_chunk_start()) * 1000000)::int8::text AS us',
  );
  return rows[0]!.us === null ? undefined : Number(rows[0]!.us);
}

/**
 * The horizon for a read: the cached one while fresh; a stale one is still returned (it is safe)
 * while a single refresh runs in the background. Only the first read of a pool waits.
 */
export async function horizonOf(pool: pg.Pool): Promise<Horizon> {
  const entry = cache.get(pool);
  if (!entry) {
    const value = await read(pool);
    cache.set(pool, { value, readAt: Date.now(), reading: undefined });
    return value;
  }
  if (Date.now() - entry.readAt > REFRESH_MS && !entry.reading) {
    entry.reading = read(pool)
      .then(
        (value) => {
          entry.value = value;
          entry.readAt = Date.now();
          return value;
        },
        () => entry.value, // the database is unreachable: the read fails on its own
      )
      .finally(() => {
        entry.reading = undefined;
      });
  }
  return entry.value;
}

/** Forgets the pool's cached horizon (maintenance after moving the boundary; tests). */
export function forgetHorizon(pool: pg.Pool): void {
  cache.delete(pool);
}
