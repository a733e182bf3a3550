// Writes COPY batches into `history` and does not give up: a batch is one COPY (one
// transaction), retried until it commits. While the database is unreachable the writer waits
// and retries with backoff (db-retry.ts), so the shard stops acknowledging (its callers wait)
// and resumes by itself. The partitions a batch needs (plain PostgreSQL) are created first, and
// again if one went missing meanwhile. A batch refused for a lasting reason (a data, constraint
// or size error: the row, not the database, is at fault) is split in halves down to the rows
// that fail; those are dropped, counted and logged (tenant, device, attribute), the rest
// commits, so one bad row cannot stall a shard forever. A part refused for its size (out of
// memory, or of lock table slots: one per partition its rows fall in) is split in halves too,
// nothing dropped. The parts not yet committed are kept
// across retries: an outage in the middle of a split goes on where it stopped, and never
// writes a committed row again.
//
// A COPY's commit can succeed while its answer is lost (the connection cut, or given up on
// client side, as PostgreSQL commits): sent again, its rows were stored twice. So each COPY runs
// in a transaction whose id is read first; when the connection fails after that, the
// transaction's fate is asked of the database (pg_xact_status, once the backend that ran it is
// gone) before the part is written again: committed, it is done. After a crash of PostgreSQL the
// id alone does not tell: an id that never reached the WAL is handed out again by the restarted
// server ("in the future" until then, afterwards another transaction's fate). So "committed" is
// believed only if the part's first row is there with that id as its xmin.
import type pg from 'pg';
import { from as copyFrom } from 'pg-copy-streams';
import { ROLLUP_LAG_MINUTES } from '../history/maintenance.js';
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
  /** The rows the database rejected (dropped), as given. */
  rejectedLines: string[];
}

const COPY_SQL = 'COPY history (tenant, device_id, attr, series, ts, value) FROM STDIN';

/**
 * Begins a COPY's transaction and reads its id, in one round trip (a simple query of two
 * statements answers with both results). A message is acknowledged once its COPY commits, so
 * the commit must be durable: a server (or database, or role) set to synchronous_commit=off is
 * overridden for this transaction (any other level, remote ones included, is kept as set).
 */
const BEGIN_SQL = `BEGIN; SELECT pg_current_xact_id()::text AS xid,
  CASE current_setting('synchronous_commit') WHEN 'off' THEN set_config('synchronous_commit', 'on', true) END AS durable`;

/**
 * A COPY of late rows (older than the current hour) fires history's late-row triggers, which
 * upsert a row per series (history_series_span) and per series and hour (history_rollup_dirty).
 * Two such COPYs at once (two instances; a worker that took the turn after 30 s) upserting the
 * same series in another order deadlocked, and PostgreSQL aborted one (retried after a second,
 * logged as an outage; found by an audit: two instances on one broker, 20,000 messages of 400
 * past days, two deadlocks). The order cannot be chosen by sorting the rows (COPY into
 * partitions fires the triggers partition buffer by partition buffer), so such COPYs take this
 * lock, held until their commit: they run one at a time across instances. Live rows never wait.
 */
const LATE_ROWS_LOCK_SQL = 'SELECT pg_advisory_xact_lock(7341002121)';

/**
 * Whether rows at these times (µs) may fire the late-row triggers: they fire for rows older than
 * the rollups' bound, the start of the hour that ended ROLLUP_LAG_MINUTES ago by the
 * database's clock (src/history/maintenance.ts; the open region's bound is older still). Taken
 * here a minute later, for a database clock ahead of this one: live rows of an hour's first
 * minutes do not take the lock (they fire nothing).
 */
function mayFireTriggers(times: number[]): boolean {
  const bound = Math.floor((Date.now() - (ROLLUP_LAG_MINUTES - 1) * 60_000) / 3_600_000) * 3_600_000 * 1000;
  for (const t of times) if (t < bound) return true;
  return false;
}

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
export function rowNames(line: string): { tenant: string; device: string; attr: string } {
  const [tenant = '', device = '', attr = ''] = line
    .split('\t', 3)
    .map((f) => f.replace(/\\(.)/g, (_, c: string) => (c === 't' ? '\t' : c === 'n' ? '\n' : c === 'r' ? '\r' : c)));
  return { tenant, device, attr };
}

/** A COPY whose transaction began and whose connection then failed: it may have committed. */
class InDoubt extends Error {
  constructor(
    /** The transaction id (xid8, as text). */
    readonly xid: string,
    /** The backend that ran it. */
    readonly pid: number,
    cause: Error,
  ) {
    super(cause.message);
  }
}

/**
 * The COPY ran out of (shared) memory: SQLSTATE 53200, which is also how PostgreSQL says its lock
 * table is full. A COPY locks every partition (and its indexes) its rows fall in, so rows of many
 * partitions (buffered readings of many days, a clock gone wrong) fail so whenever they are sent
 * together, however often: retried whole, the shard stalled for good (found by an audit). Fewer
 * rows need fewer locks (and less memory): the part is split in halves, none of them dropped.
 */
function isTooBig(err: unknown): boolean {
  return sqlState(err) === '53200';
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
    // What is not committed yet, in order, and whether the first part's last COPY may have
    // committed. Kept across retries (see the top of the file).
    const state: WriteState = { todo: [lines], doubt: undefined };
    const outcome: CopyOutcome = { seconds: 0, rejected: 0, rejectedLines: [] };
    const late = mayFireTriggers(times);
    await this.retry.run('write history', async () => {
      await this.ensureChunks(chunks, layout);
      await this.copyAll(state, chunks, layout, outcome, late);
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
  private async copyAll(state: WriteState, chunks: Set<number>, layout: HistoryLayout, outcome: CopyOutcome, late: boolean): Promise<void> {
    const todo = state.todo;
    let partitionsRetried = false;
    while (todo.length > 0) {
      const part = todo[0]!;
      if (state.doubt) {
        const committed = await this.committed(state.doubt, part[0]!);
        state.doubt = undefined;
        if (committed) {
          todo.shift();
          continue;
        }
      }
      try {
        outcome.seconds += await this.copy(part, late);
        todo.shift();
      } catch (err) {
        if (err instanceof InDoubt) {
          state.doubt = err;
          throw err;
        }
        if (!partitionsRetried && isMissingPartition(err) && !layout.timescale) {
          // A partition was dropped (retention) or created elsewhere under us: check them all again.
          partitionsRetried = true;
          this.knownChunks.clear();
          await this.ensureChunks(chunks, layout);
          continue;
        }
        if (isTooBig(err) && part.length > 1) {
          const mid = part.length >> 1;
          todo.splice(0, 1, part.slice(0, mid), part.slice(mid));
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
        outcome.rejectedLines.push(part[0]!);
        todo.shift();
      }
    }
  }

  /** One COPY of `lines` in its own transaction, in this worker's turn (copy-turn.ts). */
  private async copy(lines: string[], late: boolean): Promise<number> {
    await this.turn?.take();
    try {
      return await this.copyNow(lines, late);
    } finally {
      this.turn?.give();
    }
  }

  private async copyNow(lines: string[], late: boolean): Promise<number> {
    // Rows go in arrival order: sorting them by index key first was measured to save nothing
    // in PostgreSQL and to cost the worker ~1 µs a row.
    const started = performance.now();
    const client = await this.pool.connect();
    let broken: Error | undefined;
    let xid: string | undefined;
    try {
      // BEGIN_SQL holds several statements: pg answers one result each, an array its types do not model.
      const begun = (await client.query(BEGIN_SQL)) as unknown as pg.QueryResult<{ xid: string }>[];
      xid = begun[1]!.rows[0]!.xid;
      if (late) await client.query(LATE_ROWS_LOCK_SQL);
      const stream = client.query(copyFrom(COPY_SQL));
      await new Promise<void>((resolve, reject) => {
        stream.on('error', reject);
        stream.on('finish', resolve);
        stream.end(Buffer.from(lines.join(''), 'utf8'));
      });
      await client.query('COMMIT');
    } catch (err) {
      if (isRowError(err) || isTooBig(err)) {
        // Refused, so not committed: the connection is clean again once rolled back.
        await client.query('ROLLBACK').catch((e: Error) => (broken = e));
        throw err;
      }
      broken = err as Error;
      throw xid === undefined ? err : new InDoubt(xid, (client as pg.PoolClient & { processID: number }).processID, err as Error);
    } finally {
      client.release(broken);
    }
    return (performance.now() - started) / 1000;
  }

  /**
   * Whether the in-doubt transaction committed, once it is over. A backend still running it
   * (the network, not the server, failed) is ended first if the service may (its own role's
   * backends); otherwise the server's own timeouts end it. Throws while the database is away.
   */
  private async committed(d: InDoubt, firstLine: string): Promise<boolean> {
    for (;;) {
      const status = await this.xactStatus(d.xid);
      // 'aborted', or null (too old to know: not here, where it is seconds old): written again,
      // a duplicate rather than a loss.
      if (status !== 'in progress') return status === 'committed' && (await this.rowOf(d.xid, firstLine));
      await this.pool
        .query(
          `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
            WHERE pid = $1 AND backend_xid::text = ($2::xid8::text::numeric % 4294967296)::text`,
          [d.pid, d.xid],
        )
        .catch(() => undefined);
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  /** pg_xact_status of `xid`; an id "in the future" (the server crashed before it reached the WAL) never committed. */
  private async xactStatus(xid: string): Promise<string | null> {
    try {
      const { rows } = await this.pool.query<{ status: string | null }>('SELECT pg_xact_status($1::xid8) AS status', [xid]);
      return rows[0]?.status ?? null;
    } catch (err) {
      if (sqlState(err) === '22023' && /in the future/.test((err as Error).message)) return 'aborted';
      throw err;
    }
  }

  /** Whether the row of COPY text `line` was written by transaction `xid` (so that commit was this part's). */
  private async rowOf(xid: string, line: string): Promise<boolean> {
    const [, , , series, ts] = line.split('\t', 5);
    const { rows } = await this.pool.query<{ ours: boolean }>(
      `SELECT EXISTS (SELECT 1 FROM history WHERE series = $1::bigint AND ts = $2::timestamptz
                         AND xmin::text = ($3::xid8::text::numeric % 4294967296)::text) AS ours`,
      [series, ts, xid],
    );
    return rows[0]!.ours;
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

/** A write's progress, kept across its retries. */
interface WriteState {
  /** The parts not committed yet, in order. */
  todo: string[][];
  /** The first part's last COPY failed after its transaction began: it may have committed. */
  doubt: InDoubt | undefined;
}

/** The chunks (partition indexes, aligned to the epoch) that times in µs fall in. */
function chunksOf(times: number[], chunkUs: number): Set<number> {
  const chunks = new Set<number>();
  for (const us of times) chunks.add(Math.floor(us / chunkUs));
  return chunks;
}
