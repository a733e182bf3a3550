// Writes COPY batches into `history` and does not give up: a batch is one COPY (one
// transaction), retried until it commits. While the database is unreachable the writer waits
// and retries with backoff (db-retry.ts), so the shard stops acknowledging (its callers wait)
// and resumes by itself. The partitions a batch needs (plain PostgreSQL) are created first, and
// again if one went missing meanwhile. A batch refused for a lasting reason (a data, constraint
// or size error: the row, not the database, is at fault) is split in halves down to the rows
// that fail; those are dropped, counted and logged (tenant, device, attribute), the rest
// commits, so one bad row cannot stall a shard forever. The parts not yet committed are kept
// across retries: an outage in the middle of a split goes on where it stopped, and never
// writes a committed row again.
import type pg from 'pg';
import { from as copyFrom } from 'pg-copy-streams';
import type { Logger } from '../log.js';
import type { CopyTurn } from './copy-turn.js';
import type { DatabaseRetry } from './db-retry.js';

interface HistoryLayout {
  timescale: boolean;
  /** Chunk interval in microseconds. */
  chunkUs: number;
}

export interface CopyOutcome {
  seconds: number;
  rejected: number;
}

const COPY_SQL = 'COPY history (tenant, device_id, attr, series, ts, value) FROM STDIN';

function sqlState(err: unknown): string | undefined {
  const code = (err as { code?: unknown })?.code;
  return typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code) ? code : undefined;
}

/**
 * The database refused these rows for a lasting reason (data exception 22, integrity constraint
 * 23, program limit 54: e.g. an index row too large), as opposed to being unreachable or busy:
 * sending them again would fail again.
 */
function isRowError(err: unknown): boolean {
  const code = sqlState(err);
  return code !== undefined && (code.startsWith('22') || code.startsWith('23') || code.startsWith('54'));
}

/** The tenant, device and attribute of a COPY text row (for the log line of a rejected one). */
function rowNames(line: string): { tenant: string; device: string; attr: string } {
  const [tenant = '', device = '', attr = ''] = line
    .split('\t', 3)
    .map((f) => f.replace(/\\(.)/g, (_, c: string) => (c === 't' ? '\t' : c === 'n' ? '\n' : c === 'r' ? '\r' : c)));
  return { tenant, device, attr };
}

function isMissingPartition(err: unknown): boolean {
  return sqlState(err) === '23514' && /no partition/i.test((err as Error).message);
}

export class HistoryWriter {
  private layout: HistoryLayout | undefined;
  private readonly knownChunks = new Set<number>();

  constructor(
    private readonly pool: pg.Pool,
    private readonly log: Logger,
    private readonly retry: DatabaseRetry,
    /** Shared with the other shard workers: one COPY at a time (copy-turn.ts). */
    private readonly turn?: CopyTurn,
  ) {}

  /**
   * Commits `lines` (COPY text rows); `times` holds the time (µs) of each message that has rows
   * among them, for the partitions they need. Resolves once committed; waits through outages.
   * Returns the seconds the successful COPY took and the rows the database rejected (dropped).
   */
  async write(lines: string[], times: number[]): Promise<CopyOutcome> {
    const layout = await this.readLayout();
    const chunks = layout.timescale ? new Set<number>() : chunksOf(times, layout.chunkUs);
    // What is not committed yet, in order. Kept across retries (see the top of the file).
    const todo: string[][] = [lines];
    const outcome: CopyOutcome = { seconds: 0, rejected: 0 };
    await this.retry.run('write history', async () => {
      await this.ensureChunks(chunks, layout);
      await this.copyAll(todo, chunks, layout, outcome);
    });
    return outcome;
  }

  /** The table layout, read once (retrying until the database answers). */
  private async readLayout(): Promise<HistoryLayout> {
    if (this.layout) return this.layout;
    const row = await this.retry.run('read the history layout', async () => {
      const res = await this.pool.query<{ timescale: boolean; secs: number }>(
        'SELECT timescale, extract(epoch FROM chunk_interval)::float8 AS secs FROM history_settings',
      );
      if (!res.rows[0]) throw new Error('history_settings is empty');
      return res.rows[0];
    });
    this.layout = { timescale: row.timescale, chunkUs: row.secs * 1_000_000 };
    return this.layout;
  }

  /**
   * Commits the parts in `todo` one COPY each, in order, removing each once committed; a part
   * refused for a lasting reason is replaced by its halves, a single row is dropped. Throws on
   * anything else (the caller retries: `todo` holds what is left).
   */
  private async copyAll(todo: string[][], chunks: Set<number>, layout: HistoryLayout, outcome: CopyOutcome): Promise<void> {
    let partitionsRetried = false;
    while (todo.length > 0) {
      const part = todo[0]!;
      try {
        outcome.seconds += await this.copy(part);
        todo.shift();
      } catch (err) {
        if (!partitionsRetried && isMissingPartition(err) && !layout.timescale) {
          // A partition was dropped (retention) or created elsewhere under us: check them all again.
          partitionsRetried = true;
          this.knownChunks.clear();
          await this.ensureChunks(chunks, layout);
          continue;
        }
        if (!isRowError(err)) throw err;
        if (part.length > 1) {
          const mid = part.length >> 1;
          todo.splice(0, 1, part.slice(0, mid), part.slice(mid));
          continue;
        }
        this.log.error('the database rejected a history row; dropped', {
          ...rowNames(part[0]!),
          error: (err as Error).message,
          code: sqlState(err),
        });
        outcome.rejected++;
        todo.shift();
      }
    }
  }

  /** One COPY of `lines` in its own transaction, in this worker's turn (copy-turn.ts). */
  private async copy(lines: string[]): Promise<number> {
    await this.turn?.take();
    try {
      return await this.copyNow(lines);
    } finally {
      this.turn?.give();
    }
  }

  private async copyNow(lines: string[]): Promise<number> {
    // Rows go in arrival order: sorting them by index key first was measured to save nothing
    // in PostgreSQL and to cost the worker ~1 µs a row.
    const started = performance.now();
    const client = await this.pool.connect();
    let broken: Error | undefined;
    try {
      const stream = client.query(copyFrom(COPY_SQL));
      await new Promise<void>((resolve, reject) => {
        stream.on('error', reject);
        stream.on('finish', resolve);
        stream.end(Buffer.from(lines.join(''), 'utf8'));
      });
    } catch (err) {
      if (!isRowError(err)) broken = err as Error;
      throw err;
    } finally {
      client.release(broken);
    }
    return (performance.now() - started) / 1000;
  }

  private async ensureChunks(chunks: Set<number>, layout: HistoryLayout): Promise<void> {
    if (layout.timescale) return;
    for (const chunk of chunks) {
      if (this.knownChunks.has(chunk)) continue;
      const atSeconds = (chunk * layout.chunkUs) / 1_000_000;
      await this.pool.query('SELECT history_ensure_partition(to_timestamp($1::float8))', [atSeconds]);
      this.knownChunks.add(chunk);
    }
  }
}

/** The chunks (partition indexes, aligned to the epoch) that times in µs fall in. */
function chunksOf(times: number[], chunkUs: number): Set<number> {
  const chunks = new Set<number>();
  for (const us of times) chunks.add(Math.floor(us / chunkUs));
  return chunks;
}
