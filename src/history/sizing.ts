// Whether HISTORY_CHUNK_INTERVAL lets the chunk being written keep its index in memory.
// Every stored value adds an entry to the current chunk's (series, ts) index at a random place
// (devices report in any order), so once that index outgrows shared_buffers most inserts and
// most recent-value reads touch a page that is not in PostgreSQL's cache: measured, the
// database's CPU per ingested message more than doubles, and lastN's p99 grows with it
// (docs/messaging.md §9). TimescaleDB's sizing rule is the same: the indexes of the chunks
// being written should fit in shared_buffers (a quarter of the host's memory).
//
// The check needs written data to measure: it takes the index bytes per second of data of the
// recent complete chunks (the fullest of the last three; before any completed with data, of the current
// chunk so far) and the current chunk's index itself, and predicts a chunk's index at the
// interval in use. Run at start and whenever a chunk
// completes (src/history/maintenance.ts).
import type pg from 'pg';

export interface ChunkMeasure {
  startUs: number;
  endUs: number;
  indexBytes: number;
}

export interface SizingAdvice {
  /** Predicted index bytes of one chunk at the interval in use. */
  predictedBytes: number;
  sharedBuffersBytes: number;
  /** The largest common interval whose chunk index would fit (undefined: even one minute would not). */
  suggested: string | undefined;
  /** The interval in use (the layout's, which a changed HISTORY_CHUNK_INTERVAL does not change), e.g. `1 day`. */
  interval?: string;
}

/** Seconds as an interval text HISTORY_CHUNK_INTERVAL accepts: `1 day`, `6 hours`, `90 minutes`, `45 seconds`. */
function intervalText(seconds: number): string {
  for (const [unit, secs] of [
    ['day', 86400],
    ['hour', 3600],
    ['minute', 60],
  ] as const)
    if (seconds >= secs && seconds % secs === 0) return `${seconds / secs} ${unit}${seconds === secs ? '' : 's'}`;
  return `${seconds} second${seconds === 1 ? '' : 's'}`;
}

/** Common intervals, largest first, as HISTORY_CHUNK_INTERVAL accepts them. */
const INTERVALS: Array<[string, number]> = [
  ['7 days', 7 * 86400],
  ['1 day', 86400],
  ['12 hours', 43200],
  ['6 hours', 21600],
  ['2 hours', 7200],
  ['1 hour', 3600],
  ['30 minutes', 1800],
  ['10 minutes', 600],
  ['1 minute', 60],
];

/**
 * The advice for chunks of `intervalSeconds` from the measured chunks, or undefined when no
 * chunk has been written yet or the prediction fits in shared_buffers.
 */
export function adviseChunkInterval(opts: {
  chunks: ChunkMeasure[];
  nowUs: number;
  intervalSeconds: number;
  sharedBuffersBytes: number;
}): SizingAdvice | undefined {
  const complete = opts.chunks
    .filter((c) => c.endUs <= opts.nowUs && c.endUs > c.startUs)
    .sort((a, b) => b.endUs - a.endUs)
    .slice(0, 3);
  // An index's empty pages (meta and root) say nothing about the rate.
  const written = (c: ChunkMeasure) => Math.max(0, c.indexBytes - 16384);
  const current = opts.chunks.find((c) => c.startUs <= opts.nowUs && opts.nowUs < c.endUs);
  // Before any chunk completed with data in it, the current chunk's rate so far is all there is
  // (once a twentieth of it has passed: the check also runs the moment a chunk begins, when a
  // few seconds' rate says nothing). Empty complete chunks measure nothing: plain PostgreSQL's
  // first start makes the previous chunk's partition ahead, empty (before an audit, it hid the
  // current chunk's rate there: no warning on the way past shared_buffers, and no interval
  // suggested once past).
  const rates = complete.map((c) => written(c) / ((c.endUs - c.startUs) / 1e6));
  const elapsedUs = current ? opts.nowUs - current.startUs : 0;
  if (current && !complete.some((c) => written(c) > 0) && elapsedUs >= (current.endUs - current.startUs) / 20)
    rates.push(written(current) / (elapsedUs / 1e6));
  const bytesPerSecond = Math.max(0, ...rates);
  const predictedBytes = Math.max(bytesPerSecond * opts.intervalSeconds, current ? current.indexBytes : 0);
  if (predictedBytes <= opts.sharedBuffersBytes) return undefined;
  const fits = bytesPerSecond > 0 ? INTERVALS.find(([, secs]) => bytesPerSecond * secs <= opts.sharedBuffersBytes) : undefined;
  return { predictedBytes, sharedBuffersBytes: opts.sharedBuffersBytes, suggested: fits?.[0] };
}

/** Reads the chunk sizes and shared_buffers and advises (see adviseChunkInterval). */
export async function checkChunkSizing(pool: pg.Pool): Promise<SizingAdvice | undefined> {
  const [chunks, settings] = await Promise.all([
    pool.query<{ start_us: string; end_us: string; index_bytes: number }>(
      `SELECT (extract(epoch FROM range_start) * 1000000)::int8::text AS start_us, (extract(epoch FROM range_end) * 1000000)::int8::text AS end_us, index_bytes
         FROM history_chunk_sizes() WHERE isfinite(range_start) AND isfinite(range_end)`,
    ),
    pool.query<{ shared_buffers: number; interval_seconds: number; now_us: string }>(
      `SELECT (SELECT setting::int8 * current_setting('block_size')::int8 FROM pg_settings WHERE name = 'shared_buffers') AS shared_buffers,
              extract(epoch FROM chunk_interval)::float8 AS interval_seconds,
              (extract(epoch FROM now()) * 1000000)::int8::text AS now_us
         FROM history_settings`,
    ),
  ]);
  const s = settings.rows[0]!;
  const advice = adviseChunkInterval({
    chunks: chunks.rows.map((c) => ({ startUs: Number(c.start_us), endUs: Number(c.end_us), indexBytes: Number(c.index_bytes) })),
    nowUs: Number(s.now_us),
    intervalSeconds: s.interval_seconds,
    sharedBuffersBytes: Number(s.shared_buffers),
  });
  return advice && { ...advice, interval: intervalText(s.interval_seconds) };
}
