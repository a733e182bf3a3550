// Health for orchestrators: /health/live (the process answers) and /health/ready (database,
// migrations, broker link, ingest), on both listeners; /health as it was. Readiness against a
// broker that goes away, a database that cannot be reached, a migration that is missing, and
// ingest that is stalled.
import net from 'node:net';
import { Aedes } from 'aedes';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { loadMigrations, migrate } from '../../src/db/migrate.js';
import { createPool } from '../../src/db/pool.js';
import { Readiness } from '../../src/health.js';
import type { IngestStatus } from '../../src/ingest/index.js';
import { createLogger } from '../../src/log.js';
import { createMetrics } from '../../src/metrics.js';
import { freePort } from '../../src/net.js';
import { eventually } from '../helpers/registry-fixtures.js';
import { rawHead } from '../helpers/raw-http.js';
import { apiRoutes } from '../../src/api.js';
import { freshDatabase, http, useService } from '../helpers/service.js';
import type { ReadinessAnswer } from '../helpers/api.js';

const ALL_OK = { database: 'ok', migrations: 'ok', broker: 'ok', ingest: 'ok' };
const silent = createLogger('silent');

/** An MQTT broker of this test's own, which it can stop. */
async function privateBroker() {
  const broker = await Aedes.createBroker();
  const server = net.createServer(broker.handle);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `mqtt://127.0.0.1:${(server.address() as net.AddressInfo).port}`,
    stop: () => new Promise<void>((resolve) => broker.close(() => server.close(() => resolve()))),
  };
}

describe('over HTTP, on both listeners', () => {
  let broker: Awaited<ReturnType<typeof privateBroker>>;
  // The broker starts before the service and stops after it (afterAll hooks run last first).
  beforeAll(async () => {
    broker = await privateBroker();
  });
  afterAll(() => broker?.stop().catch(() => undefined));
  const svc = useService(() => ({ MQTT_URL: broker.url }));

  it('/health/live, /health/ready and /health answer 200', async () => {
    for (const base of [svc.base, svc.internal]) {
      expect((await http('GET', `${base}/health/live`)).body).toEqual({ status: 'ok' });
      const ready = await http('GET', `${base}/health/ready`);
      expect([ready.status, ready.body]).toEqual([200, { status: 'ready', checks: ALL_OK }]);
      expect([(await http('GET', `${base}/health`)).status, (await http('GET', `${base}/health`)).body]).toEqual([200, { status: 'ok' }]);
    }
  });

  it('/health answers whatever Accept says, as it always did; the others 406 to a client that accepts no JSON, */* and no Accept are fine', async () => {
    for (const accept of ['text/html', 'text/plain', 'application/xml'])
      expect((await http('GET', `${svc.base}/health`, { headers: { accept } })).body).toEqual({ status: 'ok' });
    for (const p of ['/health/live', '/health/ready']) {
      const refused = await http('GET', `${svc.base}${p}`, { headers: { accept: 'text/html' } });
      expect([refused.status, refused.body]).toEqual([
        406,
        { message: 'This resource is only available as application/json', status: 406 },
      ]);
      expect((await http('GET', `${svc.base}${p}`, { headers: { accept: 'text/html,*/*;q=0.8' } })).status).toBe(200);
    }
    expect((await http('GET', `${svc.base}/metrics`, { headers: { accept: 'application/json' } })).status).toBe(406);
    // The most specific range decides: an explicit q=0 refuses the type although */* allows anything.
    expect((await http('GET', `${svc.base}/health/live`, { headers: { accept: 'application/json;q=0, */*' } })).status).toBe(406);
    expect((await http('GET', `${svc.base}/metrics`, { headers: { accept: 'text/*;q=0, */*' } })).status).toBe(406);
    // Accept on several lines is one list (RFC 9110 §5.3): before (found by an audit), only the
    // first line was read, so `Accept: text/html` then `Accept: application/json` was a 406.
    for (const p of ['/health/live', '/health/ready']) {
      const answer = await rawHead(svc.base, p, ['accept: text/html', 'accept: application/json']);
      expect({ p, status: answer.status }).toEqual({ p, status: 200 });
    }
    expect((await rawHead(svc.base, '/health/live', ['accept: text/html', 'accept: application/json;q=0'])).status).toBe(406);
    expect((await http('GET', `${svc.base}/health/ready`, { headers: { accept: '*/*;q=0, application/json' } })).status).toBe(200);
    // A range named twice: the first naming decides (as for the live stream's text/event-stream).
    expect((await http('GET', `${svc.base}/health/live`, { headers: { accept: 'application/json;q=0, application/json' } })).status).toBe(
      406,
    );
    expect((await http('GET', `${svc.base}/health/live`, { headers: { accept: 'application/json, application/json;q=0' } })).status).toBe(
      200,
    );
    expect(
      (
        await http('GET', `${svc.base}/metrics`, {
          headers: { accept: 'application/openmetrics-text;version=1.0.0;q=0.5,text/plain;version=0.0.4;q=0.4,*/*;q=0.1' },
        })
      ).status,
    ).toBe(200);
  });

  it('every route whose answer reads Accept reads all its lines (declares `negotiates`); the others only the first, the cheaper read', () => {
    const reading = apiRoutes.filter((r) => /\.accept\b/.test(r.handler.toString()));
    expect(reading.map((r) => `${r.method} ${r.path}`).sort()).toEqual([
      'GET /health/live',
      'GET /health/ready',
      'GET /history/device/:id/history',
      'GET /history/export',
      'GET /live',
      'GET /metrics',
      'GET /openapi.json',
    ]);
    expect(reading.filter((r) => !r.negotiates).map((r) => r.path)).toEqual([]);
  });

  it('the broker goes away: not ready, naming the broker link; live and /health stay 200; back when the broker is', async () => {
    const port = Number(new URL(broker.url).port);
    await broker.stop();
    // Each connection notices the broker's end on its own: wait until every one has (not ready
    // already says "down: 1 of 2" while the other is still closing).
    const down = await eventually(async () => {
      const r = await http<ReadinessAnswer>('GET', `${svc.base}/health/ready`);
      return r.status === 503 && /^down: 0 of/.test(r.body.checks.broker) ? r : undefined;
    }, 'readiness to notice the broker is gone');
    expect(down.body.status).toBe('not ready');
    expect(down.body.checks).toMatchObject({ database: 'ok', migrations: 'ok', ingest: 'ok' });
    expect(down.body.checks.broker).toMatch(/^down: 0 of \d+ connections to the broker are up$/);
    expect(down.body.reasons).toEqual([`broker: ${down.body.checks.broker}`]);
    expect((await http('GET', `${svc.base}/metrics`)).text).toMatch(/^broker_link_up 0$/m);
    expect((await http('GET', `${svc.base}/health/live`)).status).toBe(200);
    expect((await http('GET', `${svc.base}/health`)).status).toBe(200);

    // The same port again: the link reconnects by itself.
    const again = await Aedes.createBroker();
    const server = net.createServer(again.handle);
    await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
    try {
      await eventually(
        async () => (await http('GET', `${svc.base}/health/ready`)).status === 200,
        'readiness once the broker is back',
        30_000,
      );
      expect((await http('GET', `${svc.base}/metrics`)).text).toMatch(/^broker_link_up 1$/m);
    } finally {
      await new Promise<void>((resolve) => again.close(() => server.close(() => resolve())));
    }
  }, 60_000);
});

describe('the readiness checks (real databases)', () => {
  const ingestOk: IngestStatus = { link: { up: true, connected: 2, connections: 2 }, pending: 0, progressAt: Date.now() };
  const pools: pg.Pool[] = [];
  afterAll(async () => {
    for (const p of pools) await p.end().catch(() => undefined);
  });
  const pool = (url: string) => {
    const p = createPool(url, 2, silent);
    pools.push(p);
    return p;
  };
  const readiness = async (p: pg.Pool, ingest: IngestStatus = ingestOk) =>
    new Readiness({ pool: p, migrations: await loadMigrations(), ingest: () => ingest, stallMs: 30_000, metrics: createMetrics() });

  it('ready with every migration applied; a missing one is named', async () => {
    const p = pool(await freshDatabase());
    await migrate(p, silent);
    const r = await readiness(p);
    expect(await r.check()).toEqual({ ready: true, checks: ALL_OK, reasons: [] });
    const last = (await loadMigrations()).at(-1)!;
    await p.query('DELETE FROM schema_migrations WHERE version = $1', [last.version]);
    const report = await r.check();
    expect(report.ready).toBe(false);
    expect(report.checks.migrations).toBe(`not applied: ${last.name}`);
    expect(report.reasons).toEqual([`migrations: not applied: ${last.name}`]);
  });

  it('a database that answers but holds no migrations at all (no schema_migrations table): reachable, every migration named as not applied', async () => {
    const p = pool(await freshDatabase());
    const report = await (await readiness(p)).check();
    const all = (await loadMigrations()).map((m) => m.name).join(', ');
    expect(report.checks).toEqual({ ...ALL_OK, migrations: `not applied: ${all}` });
    expect(report.reasons).toEqual([`migrations: not applied: ${all}`]);
  });

  it('a scrape of /metrics asks the database once for both readiness gauges, and they agree', async () => {
    const p = pool(await freshDatabase());
    await migrate(p, silent);
    const metrics = createMetrics();
    new Readiness({ pool: p, migrations: await loadMigrations(), ingest: () => ingestOk, stallMs: 30_000, metrics });
    const query = vi.spyOn(p, 'query');
    const text = await metrics.registry.metrics();
    expect(text).toMatch(/^health_ready 1$/m);
    expect(text).toMatch(/^health_check_up\{check="database"\} 1$/m);
    expect(query).toHaveBeenCalledTimes(1);
    // The next scrape checks again.
    await metrics.registry.metrics();
    expect(query).toHaveBeenCalledTimes(2);
  });

  it('a database that cannot be reached', async () => {
    const p = pool(`postgres://nobody@127.0.0.1:${await freePort()}/none`);
    const report = await (await readiness(p)).check();
    expect(report.ready).toBe(false);
    expect(report.checks.database).toMatch(/^unreachable: .*ECONNREFUSED/);
    expect(report.checks.migrations).toBe('unknown: the database did not answer');
  });

  it('ingest stalled: messages waiting and none acknowledged for longer than INGEST_STALL_SECONDS; shutting down', async () => {
    const p = pool(await freshDatabase());
    await migrate(p, silent);
    const stalled = await readiness(p, { ...ingestOk, pending: 120, progressAt: Date.now() - 45_000 });
    const report = await stalled.check();
    expect(report.checks.ingest).toBe('stalled: 120 messages wait, none acknowledged for 45 s');
    // Waiting, but progress within the limit: fine.
    expect((await (await readiness(p, { ...ingestOk, pending: 120, progressAt: Date.now() - 5_000 })).check()).ready).toBe(true);
    // No router thread: the broker link is down.
    expect((await (await readiness(p, { ...ingestOk, link: undefined })).check()).checks.broker).toBe(
      'down: the ingest router is not running',
    );
    const draining = await readiness(p);
    draining.draining = true;
    expect(await draining.check()).toEqual({ ready: false, checks: ALL_OK, reasons: ['shutting down'] });
  });
});
