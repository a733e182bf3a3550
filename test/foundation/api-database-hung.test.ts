// A request whose database connection hangs (a frozen host: the TCP connection stays up, nothing
// is answered, so neither the server's statement timeout nor TCP keepalive ever fires) is
// answered 503 in bounded time: DB_STATEMENT_TIMEOUT_MS plus the client-side margin
// (src/db/limits.ts), not held for as long as the database stays frozen.
import { afterAll, beforeAll, expect, it } from 'vitest';
import type { DevicesCreated, TemplateCreated } from '../helpers/api.js';
import { freezableProxy, type FreezableProxy } from '../helpers/faults.js';
import { http, login, startTestService, testEnv, type TestService } from '../helpers/service.js';

const STATEMENT_TIMEOUT_MS = 1000;
/** src/db/limits.ts READ_MARGIN_MS, and slack for a loaded machine. */
const BOUND_MS = STATEMENT_TIMEOUT_MS + 5000 + 3000;

let proxy: FreezableProxy;
let svc: TestService;
let token: string;
let device: string;

beforeAll(async () => {
  const env = await testEnv();
  proxy = await freezableProxy(env.DATABASE_URL!);
  svc = await startTestService({
    ...env,
    DATABASE_URL: proxy.url,
    DB_STATEMENT_TIMEOUT_MS: String(STATEMENT_TIMEOUT_MS),
    SHUTDOWN_TIMEOUT_MS: '2000',
  });
  token = await login(svc.base);
  const t = await http<TemplateCreated>('POST', `${svc.base}/template`, {
    token,
    body: { label: 'hung', attrs: [{ label: 'temperature', type: 'dynamic', value_type: 'float' }] },
  });
  const d = await http<DevicesCreated>('POST', `${svc.base}/device`, { token, body: { label: 'hung', templates: [t.body.template.id] } });
  device = d.body.devices[0]!.id;
  // The read works, and leaves its connection idle in the pool.
  expect((await http('GET', `${svc.base}/history/device/${device}/history?lastN=1`, { token })).status).toBe(200);
});

afterAll(async () => {
  await proxy?.close();
  await svc?.stop();
});

it('a read on a connection to a frozen database: 503 within the statement timeout plus the margin', async () => {
  proxy.freeze();
  const t0 = Date.now();
  const answer = await fetch(`${svc.base}/history/device/${device}/history?lastN=1`, {
    headers: { authorization: `Bearer ${token}` },
    signal: AbortSignal.timeout(3 * BOUND_MS),
  }).then(
    async (res) => ({ status: res.status, body: await res.json() }),
    (err: Error) => ({ status: 0, body: `no answer within ${3 * BOUND_MS} ms: ${err.message}` }),
  );
  const ms = Date.now() - t0;
  expect(answer).toEqual({ status: 503, body: { message: expect.any(String) as string, status: 503 } });
  expect(ms).toBeLessThan(BOUND_MS);
});
