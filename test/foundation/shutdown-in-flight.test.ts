// SIGTERM with requests in flight: each gets its whole answer (and is committed whole), later
// connections are refused, and the process exits 0 in time.
import nodeHttp from 'node:http';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import type { DevicesCreated, TemplateCreated } from '../helpers/api.js';
import { http, login, testEnv, useSpawnedServices } from '../helpers/service.js';

const spawned = useSpawnedServices();

interface RawOutcome {
  status?: number;
  body?: string;
  /** A transport failure: ECONNREFUSED, ECONNRESET, TIMEOUT, ... */
  error?: string;
}

/**
 * One request on its own connection (no keep-alive pool). `sent` resolves once the whole request
 * was handed to the socket; `done` with the complete answer or the transport failure (never hangs).
 */
function rawRequest(base: string, method: string, pathAndQuery: string, opts: { token?: string; body?: unknown; timeoutMs?: number } = {}) {
  const url = new URL(pathAndQuery, base);
  const payload = opts.body === undefined ? undefined : Buffer.from(JSON.stringify(opts.body));
  let markSent!: () => void;
  const sent = new Promise<void>((r) => (markSent = r));
  const done = new Promise<RawOutcome>((resolve) => {
    let settled = false;
    const finish = (o: RawOutcome) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      markSent();
      resolve(o);
    };
    const req = nodeHttp.request(
      {
        host: url.hostname,
        port: Number(url.port),
        method,
        path: url.pathname + url.search,
        agent: false,
        headers: {
          ...(opts.token ? { authorization: `Bearer ${opts.token}` } : {}),
          ...(payload ? { 'content-type': 'application/json', 'content-length': String(payload.length) } : {}),
        },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('error', (err: NodeJS.ErrnoException) => finish({ error: `incomplete answer (${err.code ?? err.message})` }));
        res.on('aborted', () => finish({ error: 'incomplete answer (aborted)' }));
        res.on('end', () => finish({ status: res.statusCode, body: Buffer.concat(chunks).toString('utf8') }));
      },
    );
    const timer = setTimeout(() => {
      finish({ error: 'TIMEOUT' });
      req.destroy();
    }, opts.timeoutMs ?? 20_000);
    req.on('error', (err: NodeJS.ErrnoException) => finish({ error: err.code ?? err.message }));
    req.on('finish', markSent);
    req.end(payload);
  });
  return { sent, done };
}

describe('shutdown with requests in flight', () => {
  it('SIGTERM while device batches are being created: each gets its whole 200 (and is kept), or, still running at the drain deadline, a 503 (and nothing is kept), never a 500; later connections are refused, exit 0 within 10 s', async () => {
    const env = await testEnv({ LOG_LEVEL: 'info' });
    const { svc, base } = await spawned.ready(env);
    const token = await login(base);
    const template = await http<TemplateCreated>('POST', `${base}/template`, {
      token,
      body: { label: 'batch', attrs: [{ label: 'temperature', type: 'dynamic', value_type: 'float' }] },
    });
    expect(template.status, template.text).toBe(200);
    const count = 10_000;
    const batch = (label: string) => {
      const r = rawRequest(base, 'POST', `/device?count=${count}`, { token, body: { label, templates: [template.body.template.id] } });
      return { label, sent: r.sent, done: r.done.then((o) => ({ ...o, at: Date.now() })) };
    };

    // In flight: sent, and given time to reach the service, before the signal.
    const inFlight = ['inflight0', 'inflight1', 'inflight2'].map(batch);
    await Promise.all(inFlight.map((r) => r.sent));
    await new Promise((r) => setTimeout(r, 50));
    const t0 = Date.now();
    svc.child.kill('SIGTERM');
    // Racing the signal: sent at once, before the service may have closed its listeners.
    const racing = ['racing0', 'racing1'].map(batch);
    // "shutting down" is logged in the same synchronous step that closes the listeners; give it
    // ample time, then new connections must be refused.
    await svc.waitFor(/"msg":"shutting down"/, 5_000);
    await new Promise((r) => setTimeout(r, 100));
    const late = await Promise.all(['late0', 'late1', 'late2'].map((l) => batch(l).done));

    // A batch the drain could not wait for (SHUTDOWN_TIMEOUT_MS on a busy machine) is answered 503
    // at the drain deadline, its transaction rolled back.
    const shuttingDown = { message: 'The service is shutting down; send the request again', status: 503 };
    const answered = await Promise.all(inFlight.map((r) => r.done));
    for (const [i, o] of answered.entries()) {
      expect(o.error, `in-flight request ${i}: ${o.error}`).toBeUndefined();
      // It really was in flight: answered after the signal.
      expect(o.at).toBeGreaterThanOrEqual(t0);
      expect([200, 503], o.body).toContain(o.status);
      if (o.status === 503) {
        expect(JSON.parse(o.body!)).toEqual(shuttingDown);
        continue;
      }
      const body = JSON.parse(o.body!) as DevicesCreated;
      expect(body.message).toBe('devices created');
      expect(body.devices).toHaveLength(count);
      expect(body.devices.at(-1)!.label).toBe(`inflight${i}_${count - 1}`);
    }
    const raced = await Promise.all(racing.map((r) => r.done));
    for (const o of raced) {
      // Answered in full, 503 past the drain, or refused at the connection (never a hang, a cut answer or a 500).
      if (o.error) expect(['ECONNREFUSED', 'ECONNRESET']).toContain(o.error);
      else if (o.status === 503) expect(JSON.parse(o.body!)).toEqual(shuttingDown);
      else expect([o.status, (JSON.parse(o.body!) as DevicesCreated).devices.length]).toEqual([200, count]);
    }
    for (const o of late) expect(o.error).toBe('ECONNREFUSED');

    const code = await svc.exited;
    const ms = Date.now() - t0;
    expect(code).toBe(0);
    expect(ms).toBeLessThan(10_000);
    expect(svc.output.some((l) => l.includes('shutdown timed out'))).toBe(false);

    // Every batch answered 200 was committed whole; nothing of the refused ones was.
    const expected: Record<string, number> = {};
    for (const [i, o] of [...answered, ...raced].entries()) if (o.status === 200) expected[[...inFlight, ...racing][i]!.label] = count;
    const client = new pg.Client({ connectionString: env.DATABASE_URL });
    await client.connect();
    try {
      const { rows } = await client.query<{ label: string; n: number }>(
        `SELECT split_part(label, '_', 1) AS label, count(*)::int AS n FROM devices GROUP BY 1`,
      );
      expect(Object.fromEntries(rows.map((r) => [r.label, r.n]))).toEqual(expected);
    } finally {
      await client.end();
    }
  }, 60_000);
});
