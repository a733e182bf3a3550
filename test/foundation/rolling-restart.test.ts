// A restart of the real process under HTTP and MQTT load, as an orchestrator does it: SIGTERM,
// exit 0 within SHUTDOWN_TIMEOUT_MS, the same configuration started again. Counted: no request
// fails beyond those answered 503 during the drain (a connection refused while no instance
// listens is sent again, as a load balancer would: it never reached the service), and every
// message the broker accepted is stored.
import crypto from 'node:crypto';
import mqtt from 'mqtt';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { freePort } from '../../src/net.js';
import { eventually } from '../helpers/registry-fixtures.js';
import { login, spawnService, testEnv, http, type SpawnedService } from '../helpers/service.js';
import type { DevicesCreated, TemplateCreated } from '../helpers/api.js';

const spawned: SpawnedService[] = [];
afterAll(() => {
  for (const s of spawned) if (s.child.exitCode === null && s.child.signalCode === null) s.child.kill('SIGKILL');
});

async function start(env: Record<string, string | undefined>): Promise<SpawnedService> {
  const svc = spawnService(env);
  spawned.push(svc);
  await svc.waitFor(/"msg":"ready"/, 60_000);
  return svc;
}

interface Tally {
  ok: number;
  /** Answered 503 (the drain, or the database pool closing under a request cut off). */
  unavailable: number;
  /** Not listening (between the two processes): sent again. */
  refused: number;
  failures: string[];
}

/** An HTTP client that sends its request again while the connection is refused, like a load balancer with no instance up. */
async function send(tally: Tally, what: string, url: string, init: RequestInit, accept: (status: number) => boolean): Promise<void> {
  for (let tries = 0; tries < 400; tries++) {
    let res: Response;
    try {
      res = await fetch(url, { ...init, signal: AbortSignal.timeout(15_000) });
    } catch (err) {
      const code = (err as { cause?: { code?: string } }).cause?.code;
      if (code === 'ECONNREFUSED') {
        tally.refused++;
        await new Promise((r) => setTimeout(r, 50));
        continue;
      }
      tally.failures.push(`${what}: ${code ?? (err as Error).message}`);
      return;
    }
    const text = await res.text().catch((err: Error) => `<cut: ${err.message}>`);
    if (res.status === 503) tally.unavailable++;
    else if (accept(res.status) && !text.startsWith('<cut')) tally.ok++;
    else tally.failures.push(`${what}: ${res.status} ${text.slice(0, 200)}`);
    return;
  }
  tally.failures.push(`${what}: refused for 20 s`);
}

describe('rolling restart', () => {
  it('under HTTP and MQTT load: exit 0 in time, no failed request beyond 503s during the drain, no lost message', async () => {
    const port = await freePort();
    const env = await testEnv({ LOG_LEVEL: 'info', PORT: String(port), INTERNAL_PORT: String(await freePort()) });
    const base = `http://127.0.0.1:${port}`;
    const first = await start(env);
    const token = await login(base);
    const tenant = `restart${crypto.randomBytes(3).toString('hex')}`;
    const tenantUser = await http('POST', `${base}/auth/user`, {
      token,
      body: { username: tenant, passwd: 'pw', service: tenant, profile: 'user' },
    });
    expect(tenantUser.status, tenantUser.text).toBe(201);
    const userToken = await login(base, tenant, 'pw');
    const auth = { authorization: `Bearer ${userToken}` };
    const template = await http<TemplateCreated>('POST', `${base}/template`, {
      token: userToken,
      body: { label: 'meter', attrs: [{ label: 'seq', type: 'dynamic', value_type: 'integer' }] },
    });
    const devices = await http<DevicesCreated>('POST', `${base}/device?count=4`, {
      token: userToken,
      body: { label: 'meter', templates: [template.body.template.id] },
    });
    const ids = devices.body.devices.map((d) => d.id);

    let running = true;
    const tally: Tally = { ok: 0, unavailable: 0, refused: 0, failures: [] };

    // HTTP: readers and writers, back to back, on kept-alive connections.
    let created = 0;
    const http1 = async (n: number) => {
      for (let i = 0; running; i++) {
        const id = ids[i % ids.length]!;
        if (n % 2 === 0) await send(tally, `GET /device/${id}`, `${base}/device/${id}`, { headers: auth }, (s) => s === 200);
        else {
          const label = `made${n}_${i}`;
          await send(
            tally,
            `POST /device ${label}`,
            `${base}/device`,
            { method: 'POST', headers: { ...auth, 'content-type': 'application/json' }, body: JSON.stringify({ label, templates: [] }) },
            (s) => s === 200,
          );
          created++;
        }
      }
    };

    // MQTT: each device publishes QoS 1 messages numbered from 0; a number counts as sent once the broker acknowledged it.
    const sent = new Map<string, number[]>(ids.map((id) => [id, []]));
    const publishers = await Promise.all(
      ids.map((id) =>
        mqtt.connectAsync(env.MQTT_URL!, { protocolVersion: 4, clientId: `pub-${tenant}-${id}`, clean: true, reconnectPeriod: 200 }),
      ),
    );
    const mqtt1 = async (id: string, client: mqtt.MqttClient) => {
      for (let seq = 0; running; seq++) {
        await client.publishAsync(`${tenant}:${id}/attrs`, JSON.stringify({ seq }), { qos: 1 });
        sent.get(id)!.push(seq);
        await new Promise((r) => setTimeout(r, 10));
      }
    };

    const load = [...[0, 1, 2, 3].map(http1), ...ids.map((id, i) => mqtt1(id, publishers[i]!))];
    await new Promise((r) => setTimeout(r, 1500));
    const before = tally.ok;

    const t0 = Date.now();
    first.child.kill('SIGTERM');
    expect(await first.exited).toBe(0);
    const stopMs = Date.now() - t0;
    expect(stopMs).toBeLessThan(8000);
    expect(first.output.some((l) => l.includes('shutdown timed out'))).toBe(false);

    const second = await start(env);
    const afterRestart = tally.ok;
    await new Promise((r) => setTimeout(r, 1500));
    running = false;
    await Promise.all(load);
    await Promise.all(publishers.map((c) => c.endAsync()));

    expect(tally.failures).toEqual([]);
    expect(before).toBeGreaterThan(20);
    expect(tally.ok - afterRestart).toBeGreaterThan(5);
    expect(created).toBeGreaterThan(10);

    // Every message the broker accepted is stored (at least once).
    const db = new pg.Client({ connectionString: env.DATABASE_URL });
    await db.connect();
    try {
      const total = [...sent.values()].reduce((a, l) => a + l.length, 0);
      expect(total).toBeGreaterThan(40);
      await eventually(
        async () => {
          const { rows } = await db.query<{ n: number }>(
            `SELECT count(DISTINCT (device_id, value))::int AS n FROM history WHERE tenant = $1`,
            [tenant],
          );
          return rows[0]!.n >= total || undefined;
        },
        'every accepted message stored',
        30_000,
      );
      for (const [id, seqs] of sent) {
        const { rows } = await db.query<{ value: string }>(
          `SELECT DISTINCT value FROM history WHERE tenant = $1 AND device_id = $2 AND attr = 'seq'`,
          [tenant, id],
        );
        const stored = new Set(rows.map((r) => Number(r.value)));
        const lost = seqs.filter((s) => !stored.has(s));
        expect(lost, `device ${id}: messages lost`).toEqual([]);
      }
    } finally {
      await db.end();
    }

    second.child.kill('SIGTERM');
    expect(await second.exited).toBe(0);
    // Both logs are JSON lines with no error.
    for (const svc of [first, second]) {
      const errorsLogged = svc.output.map((l) => JSON.parse(l) as { level: string; msg: string }).filter((l) => l.level === 'error');
      expect(errorsLogged).toEqual([]);
    }
    console.log(
      `rolling restart: ${tally.ok} answered, ${tally.unavailable} × 503, ${tally.refused} refused connections retried; stop took ${stopMs} ms`,
    );
  }, 120_000);
});
