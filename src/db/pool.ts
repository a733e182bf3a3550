import pg from 'pg';
import type { Logger } from '../log.js';
import { connectionLimits, keepClientErrors, SESSION_OPTIONS, type ConnectionLimits } from './limits.js';

// int8 (bigint) ids fit in a JS number for any realistic registry size.
pg.types.setTypeParser(pg.types.builtins.INT8, (v) => Number(v));

export type Pool = pg.Pool;

/** The connections each pool has handed out and not yet taken back (for `endPool`). */
const inUse = new WeakMap<pg.Pool, Set<pg.PoolClient>>();
/** The connections each pool has open, until closed (pg-pool's 'remove' follows the close). */
const open = new WeakMap<pg.Pool, Set<pg.PoolClient>>();
const ending = new WeakMap<pg.Pool, Promise<void>>();

/**
 * How long one of the pool's connections serves before it is replaced. History reads prepare a
 * statement per region horizon (src/history/repo.ts), and PostgreSQL keeps a prepared statement
 * for its connection's life: under steady load a connection is never idle long enough to be
 * closed, so without a lifetime the statements of every past horizon piled up in its backend
 * (~50 kB each). An hour bounds them at one hour's worth; the reconnect is unnoticeable.
 */
const CONNECTION_LIFETIME_SECONDS = 3600;

export function createPool(
  url: string,
  max: number,
  log: Logger,
  opts: { limits?: ConnectionLimits; lifetimeSeconds?: number } = {},
): pg.Pool {
  // JIT compilation only adds latency to the short, index-driven queries this service runs
  // (measured: ~200 ms on large counts where the server has JIT enabled). extra_float_digits=1
  // (PostgreSQL's default): doubles written as text (aggregate buckets' avg, min, max, sum) in
  // their shortest exact form whatever the database or role sets; with 0 they were cut to 15
  // significant digits (found by an audit: a max of 0.1234567890123456 answered 0.123456789012346).
  const pool = new pg.Pool({
    connectionString: url,
    max,
    idleTimeoutMillis: 30_000,
    connectionTimeoutMillis: 10_000,
    maxLifetimeSeconds: opts.lifetimeSeconds ?? CONNECTION_LIFETIME_SECONDS,
    options: `-c jit=off -c extra_float_digits=1 ${SESSION_OPTIONS}`,
    ...(opts.limits ? connectionLimits(opts.limits, true) : {}),
  });
  // An idle client losing its connection (database restart) must not crash the process.
  pool.on('error', (err) => log.warn('idle database connection failed', { error: err.message }));
  keepClientErrors(pool, (err) => log.debug('database connection failed in use', { error: err.message }));
  const clients = new Set<pg.PoolClient>();
  pool.on('acquire', (client) => clients.add(client));
  pool.on('release', (_err: Error | undefined, client: pg.PoolClient) => clients.delete(client));
  pool.on('remove', (client) => clients.delete(client));
  inUse.set(pool, clients);
  const connections = new Set<pg.PoolClient>();
  pool.on('connect', (client) => connections.add(client));
  pool.on('remove', (client) => connections.delete(client));
  open.set(pool, connections);
  return pool;
}

/**
 * Closes the pool: no connection is handed out any more, idle ones close, and the call resolves
 * once those in use came back and every connection has closed. pg-pool's own end resolves once
 * it has asked them to close; the embedded PostgreSQL, stopped right after, then ended them
 * first, and each was logged as a failed connection (found by an audit: warnings before the one
 * line of a failed start). `abortInUse`: those in use are closed now, which rolls back their
 * open transactions (shutdown, for requests already answered 503). Called again, the same promise.
 */
export function endPool(pool: pg.Pool, opts: { abortInUse?: boolean } = {}): Promise<void> {
  let ended = ending.get(pool);
  if (!ended) ending.set(pool, (ended = pool.end().then(() => allClosed(pool))));
  if (opts.abortInUse) for (const client of inUse.get(pool) ?? []) void (client as pg.PoolClient & pg.Client).end().catch(() => undefined);
  return ended;
}

/** Resolves once none of the pool's connections is open. */
function allClosed(pool: pg.Pool): Promise<void> {
  const connections = open.get(pool);
  if (!connections?.size) return Promise.resolve();
  return new Promise((resolve) => {
    const closed = () => {
      if (connections.size > 0) return;
      pool.off('remove', closed);
      resolve();
    };
    pool.on('remove', closed);
  });
}

/** Socket errors of a database that is down or unreachable. */
const UNREACHABLE_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ETIMEDOUT',
  'EPIPE',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ENOTFOUND',
  'EAI_AGAIN',
]);
/**
 * SQLSTATEs of a server that cannot serve now: shutting down, starting, recovering, out of
 * connections. Beside them, classes 08 (connection exception) and 28 (the login refused: a
 * password changed in the database before DATABASE_URL, docs/operations.md §5, or a role that
 * may not log in), which leave the service without a connection just the same.
 */
const UNAVAILABLE_STATES = new Set(['57P01', '57P02', '57P03', '53300']);
/**
 * pg's own messages for a lost connection, a pool that found none in time, one closed by
 * shutdown, or a server that did not answer at all (connectionLimits' client-side bound).
 */
const UNAVAILABLE_MESSAGES =
  /^(Connection terminated|timeout exceeded when trying to connect|Client has encountered a connection error|Cannot use a pool after calling end on the pool|Query read timeout)|is not currently accepting connections/;

/**
 * Whether a failure means the database is unavailable (down, restarting, unreachable, or no
 * connection to be had), as opposed to a bug: the API answers those 503 so clients retry.
 */
export function isDatabaseUnavailable(err: unknown): boolean {
  const { code, syscall } = (err ?? {}) as { code?: unknown; syscall?: unknown };
  if (typeof code === 'string' && (UNREACHABLE_CODES.has(code) || UNAVAILABLE_STATES.has(code) || /^(08|28)/.test(code))) return true;
  // A database reached by its Unix socket (`?host=/var/run/postgresql`): PostgreSQL removes the
  // socket file when it stops, so connecting while it is down fails ENOENT, not ECONNREFUSED.
  if (code === 'ENOENT' && syscall === 'connect') return true;
  return err instanceof Error && UNAVAILABLE_MESSAGES.test(err.message);
}

/** SQLSTATEs after which the whole transaction may simply run again: deadlock, serialization failure. */
const RETRYABLE = new Set(['40P01', '40001']);
const TRANSACTION_TRIES = 3;

/**
 * Runs `fn` in one transaction on one client; rolls back on any error. A transaction that
 * PostgreSQL aborted as a deadlock victim (two bulk creations drawing the same random ids, say)
 * runs again from the start, up to three times: `fn` must not act outside the transaction.
 */
export async function inTransaction<T>(pool: pg.Pool, fn: (client: pg.PoolClient) => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await once(pool, fn);
    } catch (err) {
      if (attempt >= TRANSACTION_TRIES || !RETRYABLE.has((err as { code?: string }).code ?? '')) throw err;
    }
  }
}

async function once<T>(pool: pg.Pool, fn: (client: pg.PoolClient) => Promise<T>): Promise<T> {
  const client = await pool.connect();
  let broken: Error | undefined;
  try {
    await client.query('BEGIN');
    const result = await fn(client);
    await client.query('COMMIT');
    return result;
  } catch (err) {
    // A client whose ROLLBACK fails has lost its connection: destroy it instead of reusing it.
    await client.query('ROLLBACK').catch((e: Error) => (broken = e));
    throw err;
  } finally {
    client.release(broken);
  }
}
