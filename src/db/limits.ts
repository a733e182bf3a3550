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

/** Client-side margin past the statement timeout, for a server that cannot even say it cancelled. */
const READ_MARGIN_MS = 5000;

/**
 * pg pool options for these limits. `clientSide`: also give up on the client side a little
 * after the statement timeout (a dead network gets no answer from the server at all). Only for
 * pools whose users release a failed connection as broken (ingest): a timed-out query may still
 * run on its connection.
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
 * A connection that fails while checked out (its backend terminated or the socket broken
 * mid-statement) emits 'error' on the client, which the pool no longer listens to then: with no
 * listener that is an uncaught exception that ends the thread. The statement itself fails all
 * the same, and its caller handles that; the event is only logged.
 */
export function keepClientErrors(pool: pg.Pool, onError: (err: Error) => void): void {
  pool.on('connect', (client) => client.on('error', onError));
}
