// The registry's LISTEN connection (src/registry/events.ts), lost during a database outage, is
// opened again once: an attempt that failed as it opened both ended and rejected, and each
// scheduled a retry, so the attempts doubled every second of the outage and as many listeners
// were left afterwards (found by an audit: 20 after 6 s), each delivering every other
// instance's change, and its "caches dropped" event, to this instance again.
import net from 'node:net';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { LISTEN_APPLICATION_NAME, RegistryEvents, type RegistryEvent } from '../../src/registry/events.js';
import { createLogger } from '../../src/log.js';
import { countOf } from '../helpers/db.js';
import { freshDatabase } from '../helpers/service.js';
import { listenAsProxy } from '../helpers/faults.js';

/** A TCP proxy to the database that can go away (every connection cut, new ones refused) and come back. */
async function outageProxy(databaseUrl: string) {
  const target = new URL(databaseUrl);
  const sockets = new Set<net.Socket>();
  let down = false;
  let refused = 0;
  const server = net.createServer((client) => {
    if (down) {
      refused++;
      return client.destroy();
    }
    const upstream = net.connect(Number(target.port || 5432), target.hostname);
    const cut = () => {
      client.destroy();
      upstream.destroy();
    };
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on('close', () => sockets.delete(s));
      s.on('error', cut);
    }
    client.pipe(upstream);
    upstream.pipe(client);
  });
  const url = await listenAsProxy(server, databaseUrl);
  return {
    url,
    refused: () => refused,
    goAway() {
      down = true;
      for (const s of sockets) s.destroy();
    },
    comeBack() {
      down = false;
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}

const cleanups: (() => Promise<unknown>)[] = [];
afterAll(async () => {
  for (const c of cleanups.reverse()) await c().catch(() => undefined);
});

describe('registry change notifications after a database outage', () => {
  it('one listening connection afterwards, one retry a second during it, one "caches dropped" event, and a change of another instance heard once', async () => {
    const databaseUrl = await freshDatabase();
    const dbName = new URL(databaseUrl).pathname.slice(1);
    const admin = new pg.Pool({ connectionString: databaseUrl, max: 2 });
    cleanups.push(() => admin.end());
    const proxy = await outageProxy(databaseUrl);
    cleanups.push(() => proxy.close());
    const pool = new pg.Pool({ connectionString: proxy.url, max: 2 });
    pool.on('error', () => undefined);
    cleanups.push(() => pool.end());
    const events = new RegistryEvents(pool, proxy.url, createLogger('silent'));
    cleanups.push(() => events.close());
    const heard: RegistryEvent[] = [];
    events.on((e) => heard.push(e));
    await events.start();
    const listening = () =>
      countOf(admin, `SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = $1 AND application_name = $2`, [
        dbName,
        LISTEN_APPLICATION_NAME,
      ]);
    expect(await listening()).toBe(1);

    proxy.goAway();
    await new Promise((r) => setTimeout(r, 6000));
    // One attempt a second (the first one second after the loss): about 5, not 2^5.
    expect(proxy.refused()).toBeLessThanOrEqual(7);
    proxy.comeBack();
    await new Promise((r) => setTimeout(r, 2500));
    expect(await listening()).toBe(1);
    // One "caches dropped" when the connection was lost, one once listening again; none per failed attempt.
    expect(heard.filter((e) => e.type === 'tenant.changed')).toHaveLength(2);

    // Another instance's change (a NOTIFY from another connection) is heard once.
    heard.length = 0;
    const other = new RegistryEvents(admin, databaseUrl, createLogger('silent'));
    cleanups.push(() => other.close());
    await other.publish({ type: 'devices.removed', tenant: 'acme', deviceIds: ['abc'] });
    await new Promise((r) => setTimeout(r, 500));
    expect(heard.filter((e) => e.type === 'devices.removed')).toHaveLength(1);
  });
});
