// Health probes (/health/ready, /health) while the database hangs (a frozen host: connections stay
// open, nothing is answered): each probe answers 503 within 2 s, and probes of a route share the
// one database query still waiting instead of each leaving its own behind (found by an audit: seven probes left six
// pool connections in use, so probes every few seconds used up the pool of the API, which
// then waited for connections, until the client-side read timeout released them).
import { afterAll, beforeAll, expect, it } from 'vitest';
import { freezableProxy, type FreezableProxy } from '../helpers/faults.js';
import { startTestService, testEnv, type TestService } from '../helpers/service.js';

let proxy: FreezableProxy;
let svc: TestService;

beforeAll(async () => {
  const env = await testEnv();
  proxy = await freezableProxy(env.DATABASE_URL!);
  svc = await startTestService({ ...env, DATABASE_URL: proxy.url, PG_POOL_SIZE: '10', SHUTDOWN_TIMEOUT_MS: '2000' });
});

afterAll(async () => {
  await proxy?.close();
  await svc?.stop();
});

/** The pool's gauge of connections in use, from /metrics (its scrape checks readiness too). */
async function inUse(): Promise<number> {
  const text = await (await fetch(`${svc.base}/metrics`)).text();
  return Number(/^db_pool_connections\{state="in_use"\} (\d+)$/m.exec(text)?.[1]);
}

it('probes of a hung database answer 503 in time and hold one pool connection per route between them', async () => {
  expect(await inUse()).toBe(0);
  proxy.freeze();
  for (let round = 0; round < 3; round++) {
    const answers = await Promise.all(
      Array.from({ length: 6 }, async () => {
        const t0 = Date.now();
        const res = await fetch(`${svc.base}/health/ready`);
        const body = (await res.json()) as { reasons: string[] };
        return { status: res.status, database: body.reasons.find((r) => r.startsWith('database:')), ms: Date.now() - t0 };
      }),
    );
    for (const a of answers) {
      expect(a).toMatchObject({ status: 503, database: 'database: unreachable: no answer within 2 s' });
      expect(a.ms).toBeLessThan(6000);
    }
    const health = await Promise.all(
      Array.from({ length: 6 }, async () => {
        const t0 = Date.now();
        const res = await fetch(`${svc.base}/health`);
        await res.arrayBuffer();
        return { status: res.status, ms: Date.now() - t0 };
      }),
    );
    for (const h of health) {
      expect(h.status).toBe(503);
      expect(h.ms).toBeLessThan(6000);
    }
  }
  // One query of /health/ready (shared with the scrape's), one of /health.
  expect(await inUse()).toBe(2);
}, 60_000);
