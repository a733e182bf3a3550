// The live fan-out's LISTEN connection, lost and opened again, is opened once: a connection
// that drops again right as it asks to LISTEN (the database restarting, a flaky network) used
// to be retried twice (by its 'end' and by the failed query), leaving two listeners that each
// delivered every other instance's message to this instance's stream clients.
import net from 'node:net';
import { afterAll, describe, expect, it } from 'vitest';
import { LiveFeed } from '../../src/live/feed.js';
import { createLogger } from '../../src/log.js';
import { createMetrics } from '../../src/metrics.js';
import { countOf } from '../helpers/db.js';
import { freshDatabase } from '../helpers/service.js';
import { inspectingProxy } from '../helpers/faults.js';
import pg from 'pg';

const LISTEN_APP = 'device-registry-live-listen';

/** A TCP proxy to the database that can cut the listening connections: the current ones, or the next one as it sends LISTEN. */
async function cuttingProxy(databaseUrl: string) {
  const listeners = new Set<net.Socket>();
  const listening = new WeakSet<net.Socket>();
  let cutNextListen = false;
  const proxy = await inspectingProxy(databaseUrl, (chunk, conn) => {
    if (chunk.includes(LISTEN_APP)) {
      listening.add(conn.client);
      listeners.add(conn.client);
      conn.client.on('close', () => listeners.delete(conn.client));
    }
    if (listening.has(conn.client) && cutNextListen && chunk.includes('LISTEN ')) {
      cutNextListen = false;
      conn.cut();
      return false;
    }
    return true;
  });
  return {
    url: proxy.url,
    /** Cuts the listening connections now, and the next one when it sends its LISTEN. */
    cutListenersTwice() {
      cutNextListen = true;
      for (const s of listeners) s.destroy();
    },
    close: () => proxy.close(),
  };
}

const cleanups: (() => Promise<unknown>)[] = [];
afterAll(async () => {
  for (const c of cleanups.reverse()) await c().catch(() => undefined);
});

describe('live fan-out: the LISTEN connection', () => {
  it('lost, then lost again as it asks to LISTEN: one listening connection afterwards, not two', async () => {
    const databaseUrl = await freshDatabase();
    const dbName = new URL(databaseUrl).pathname.slice(1);
    const admin = new pg.Pool({ connectionString: databaseUrl, max: 1 });
    cleanups.push(() => admin.end());
    const proxy = await cuttingProxy(databaseUrl);
    cleanups.push(() => proxy.close());
    const feed = new LiveFeed({
      databaseUrl: proxy.url,
      limits: { statementTimeoutMs: 10_000, keepaliveSeconds: 30 },
      fanout: true,
      metrics: createMetrics(),
      log: createLogger('silent'),
    });
    cleanups.push(() => feed.close());
    await feed.start();
    const listening = () =>
      countOf(
        admin,
        `SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = $1 AND application_name = $2 AND query LIKE 'LISTEN%'`,
        [dbName, LISTEN_APP],
      );
    expect(await listening()).toBe(1);
    proxy.cutListenersTwice();
    // Reopened 1 s after the loss, cut at its LISTEN, reopened 1 s later: settled within 4 s.
    await new Promise((r) => setTimeout(r, 4000));
    expect(await listening()).toBe(1);
  });
});
