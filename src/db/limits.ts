// How long a database connection may hang: every pool of the service (the API's, the ingest
// router's, each shard worker's) gets a server-side statement timeout (DB_STATEMENT_TIMEOUT_MS,
// also its idle-in-transaction timeout) and TCP keepalive (DB_KEEPALIVE_SECONDS), so a statement stuck behind a lock or on a dead
// connection fails in bounded time instead of holding its caller forever. Ingest retries what
// failed (db-retry.ts); the API answers the error.
import type pg from 'pg';

export interface ConnectionLimits {
  /** Server-side statement_timeout in ms; 0: none. */
  statementTimeoutMs: number;
  /** TCP keepalive: idle seconds before the first probe. */
  keepaliveSeconds: number;
}

/**
 * Session settings every connection of the service starts with (libpq `options`), whatever the
 * database or role sets. DateStyle ISO: node-postgres reads timestamps only in ISO, and only ISO
 * writes a time with its numeric offset. Another style writes the zone's abbreviation, which
 * PostgreSQL may read back as another offset (`IST`, Asia/Kolkata's +05:30, is read as Israel's
 * +02): found by an audit on a database with `datestyle = 'SQL, DMY'` and `timezone =
 * 'Asia/Kolkata'`, where aggregate reads took the rolled hours 3.5 hours off (buckets after
 * `dateTo`, hours counted twice), partitions and late-row triggers were made with bounds 3.5
 * hours off, and the rollup pass failed (its times parsed as null).
 */
export const SESSION_OPTIONS = '-c datestyle=ISO,MDY';

/** Client-side margin past the statement timeout, for a server that cannot even say it cancelled. */
const READ_MARGIN_MS = 5000;

/**
 * pg pool options for these limits. `clientSide`: also give up on the client side a little
 * after the statement timeout (a dead network, or a frozen host whose TCP still answers, gets no
 * answer from the server at all: keepalive alone never fires). Only for pools whose users
 * release a failed connection as broken (`pool.query`, `inTransaction`, ingest's writer): a
 * timed-out query may still run on its connection.
 */
export function connectionLimits(limits: ConnectionLimits, clientSide: boolean): pg.PoolConfig {
  const timeout = limits.statementTimeoutMs;
  return {
    keepAlive: true,
    keepAliveInitialDelayMillis: limits.keepaliveSeconds * 1000,
    // A transaction left open by a client that vanished mid-way ends too (ingest asks a COPY's
    // fate once its backend is gone: history-writer.ts).
    ...(timeout > 0 ? { statement_timeout: timeout, idle_in_transaction_session_timeout: timeout } : {}),
    ...(timeout > 0 && clientSide ? { query_timeout: timeout + READ_MARGIN_MS } : {}),
  };
}

/**
 * Lifts both time bounds of a checked-out connection for what follows (a migration, an export:
 * legitimately longer than DB_STATEMENT_TIMEOUT_MS). The returned `restore` sets them back
 * before the connection goes back to the pool; it fails if the connection did, and a connection
 * not restored must be released as broken.
 */
export async function liftTimeouts(client: pg.PoolClient): Promise<() => Promise<void>> {
  // pg reads the client-side bound per query from the connection's parameters (not in @types/pg).
  const params = (client as unknown as { connectionParameters: { query_timeout?: number } }).connectionParameters;
  const readTimeout = params.query_timeout;
  await client.query('SET statement_timeout = 0');
  params.query_timeout = undefined;
  return async () => {
    params.query_timeout = readTimeout;
    // RESET: back to the connection's startup value, the pool's.
    await client.query('RESET statement_timeout');
  };
}

/**
 * A connection that fails while checked out (its backend terminated or the socket broken
 * mid-statement) emits 'error' on the client, which the pool no longer listens to then: with no
 * listener that is an uncaught exception that ends the thread. The statement itself fails all
 * the same, and its caller handles that; the event is only logged.
 */
export function keepClientErrors(pool: pg.Pool, onError: (err: Error) => void): void {
  pool.on('connect', (client) => client.on('error', onError));
}
