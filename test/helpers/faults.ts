// Helpers of the fault tests: the database taken away and given back, and publishers whose
// messages carry a unique sequence number, so what history holds can be checked for loss
// (an acknowledged number missing) and duplicates (a number stored twice).
import net from 'node:net';
import pg from 'pg';
import type mqtt from 'mqtt';
import { http, startTestService, type TestService } from './service.js';
import { createDevice, createTemplate, metric } from './registry-fixtures.js';

/**
 * Refuses new connections to the database of `databaseUrl` and ends the open ones (the
 * service's pools too). Resolves with the function that lets connections in again.
 */
export async function takeDatabaseAway(databaseUrl: string): Promise<() => Promise<void>> {
  const dbName = new URL(databaseUrl).pathname.slice(1);
  const adminUrl = new URL(databaseUrl);
  adminUrl.pathname = '/postgres';
  const admin = new pg.Client({ connectionString: adminUrl.toString() });
  await admin.connect();
  await admin.query(`ALTER DATABASE "${dbName}" ALLOW_CONNECTIONS false`);
  await admin.query('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()', [dbName]);
  return async () => {
    await admin.query(`ALTER DATABASE "${dbName}" ALLOW_CONNECTIONS true`);
    await admin.end();
  };
}

/** The sum of a labelled gauge's samples, e.g. every shard's `ingest_queue_depth`. */
export async function gaugeSum(base: string, name: string): Promise<number> {
  const text = (await http('GET', `${base}/metrics`)).text;
  return text
    .split('\n')
    .filter((l) => l.startsWith(`${name}{`) || l.startsWith(`${name} `))
    .reduce((s, l) => s + Number(l.slice(l.lastIndexOf(' ') + 1)), 0);
}

/** One sample of the service's metrics. */
export async function metricOf(base: string, sample: string): Promise<number> {
  return metric((await http('GET', `${base}/metrics`)).text, sample);
}

/**
 * Publishes `{seq: n}` QoS 1 messages with numbers from `first` upwards to `topic`, `count` of
 * them, all at once (no window: the client holds them until acknowledged). Resolves the
 * numbers whose PUBACK came; a publish that failed (connection lost) is left out.
 */
export function publishSequence(client: mqtt.MqttClient, topic: string, first: number, count: number): Promise<number[]> {
  return Promise.all(
    Array.from({ length: count }, (_, i) =>
      client.publishAsync(topic, JSON.stringify({ seq: first + i }), { qos: 1 }).then(
        () => first + i,
        () => -1,
      ),
    ),
  ).then((acked) => acked.filter((n) => n >= 0));
}

export interface SequenceCheck {
  /** Acknowledged numbers missing from history. */
  lost: number[];
  /** Rows beyond the first of numbers stored more than once. */
  duplicates: number;
  stored: number;
}

/** Compares the `seq` values stored for `tenant` (attribute `seq`) with the acknowledged numbers. */
export async function checkSequence(db: Pick<pg.Pool, 'query'>, tenant: string, acked: Iterable<number>): Promise<SequenceCheck> {
  const { rows } = await db.query<{ seq: number; n: number }>(
    `SELECT value::bigint AS seq, count(*)::int AS n FROM history WHERE tenant = $1 AND attr = 'seq' GROUP BY 1`,
    [tenant],
  );
  const counts = new Map(rows.map((r) => [Number(r.seq), r.n]));
  const lost: number[] = [];
  for (const n of acked) if (!counts.has(n)) lost.push(n);
  let duplicates = 0;
  let stored = 0;
  for (const n of counts.values()) {
    stored += n;
    duplicates += n - 1;
  }
  return { lost, duplicates, stored };
}

/** Starts a proxy `server` on a free loopback port; the database URL that goes through it. */
export async function listenAsProxy(server: net.Server, databaseUrl: string): Promise<string> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = new URL(databaseUrl);
  url.hostname = '127.0.0.1';
  url.port = String((server.address() as net.AddressInfo).port);
  return url.toString();
}

/** A TCP proxy to the database that can hang it: what is sent is no longer answered, and nothing is closed. */
export interface FreezableProxy {
  /** The database URL through the proxy. */
  url: string;
  /** From now on no byte goes either way and new connections wait forever, as with a frozen server. */
  freeze(): void;
  close(): Promise<void>;
}

export async function freezableProxy(databaseUrl: string): Promise<FreezableProxy> {
  const target = new URL(databaseUrl);
  const sockets = new Set<net.Socket>();
  let frozen = false;
  const server = net.createServer((client) => {
    sockets.add(client);
    client.on('close', () => sockets.delete(client));
    client.on('error', () => client.destroy());
    if (frozen) return client.pause();
    const upstream = net.connect(Number(target.port || 5432), target.hostname);
    sockets.add(upstream);
    upstream.on('close', () => {
      sockets.delete(upstream);
      if (!frozen) client.destroy();
    });
    upstream.on('error', () => upstream.destroy());
    client.on('close', () => {
      if (!frozen) upstream.destroy();
    });
    client.pipe(upstream);
    upstream.pipe(client);
  });
  const url = await listenAsProxy(server, databaseUrl);
  return {
    url,
    freeze() {
      frozen = true;
      for (const s of sockets) {
        s.unpipe();
        s.pause();
      }
    },
    async close() {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** A client connection through an `inspectingProxy`, as its `inspect` sees it. */
export interface ProxiedConnection {
  client: net.Socket;
  /** Ends both sides of this connection. */
  cut(): void;
}

/**
 * A TCP proxy to the database that shows every chunk a client sends to `inspect` before passing
 * it on; `inspect` returns false to withhold it (having cut the connection, say). The server's
 * answers pass untouched.
 */
export async function inspectingProxy(
  databaseUrl: string,
  inspect: (chunk: Buffer, conn: ProxiedConnection) => boolean,
): Promise<{ url: string; close(): Promise<void> }> {
  const target = new URL(databaseUrl);
  const all = new Set<net.Socket>();
  const server = net.createServer((client) => {
    const upstream = net.connect(Number(target.port || 5432), target.hostname);
    all.add(client).add(upstream);
    const cut = () => {
      client.destroy();
      upstream.destroy();
      all.delete(client);
      all.delete(upstream);
    };
    for (const s of [client, upstream]) {
      s.on('error', cut);
      s.on('close', cut);
    }
    const conn: ProxiedConnection = { client, cut };
    client.on('data', (chunk: Buffer) => {
      if (inspect(chunk, conn)) upstream.write(chunk);
    });
    upstream.pipe(client);
  });
  const url = await listenAsProxy(server, databaseUrl);
  return {
    url,
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of all) s.destroy();
        server.close(() => resolve());
      }),
  };
}

/** A database proxy that can keep the listening connections of one `application_name` away. */
export interface ListenBlockingProxy {
  url: string;
  /** Cuts the listening connections, and every new one while blocked. */
  block(): void;
  unblock(): void;
  close(): Promise<void>;
}

/** A TCP proxy to the database that, while blocked, cuts the connections named `applicationName` (current and new). */
export async function listenBlockingProxy(databaseUrl: string, applicationName: string): Promise<ListenBlockingProxy> {
  const listeners = new Set<net.Socket>();
  let blocked = false;
  const proxy = await inspectingProxy(databaseUrl, (chunk, conn) => {
    if (!chunk.includes(applicationName)) return true;
    if (blocked) {
      conn.cut();
      return false;
    }
    listeners.add(conn.client);
    return true;
  });
  return {
    url: proxy.url,
    block() {
      blocked = true;
      for (const s of listeners) s.destroy();
      listeners.clear();
    },
    unblock() {
      blocked = false;
    },
    close: () => proxy.close(),
  };
}

/**
 * A service that stalls quickly (embedded broker, a receive window of 100 messages, ingest
 * reported stalled after 2 s without a commit), with one device of `tenant` (attribute `n`,
 * integer). The caller stops it.
 */
export async function quicklyStalledService(tenant: string): Promise<{ svc: TestService; device: string }> {
  const svc = await startTestService({ MQTT_URL: undefined, INGEST_MAX_PENDING: '100', INGEST_STALL_SECONDS: '2' });
  const t = await createTemplate(svc.service.pool, tenant, 't', [{ label: 'n', type: 'dynamic', value_type: 'integer' }]);
  return { svc, device: await createDevice(svc.service.pool, tenant, [t]) };
}
