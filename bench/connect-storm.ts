// Connect storm (docs/credentials.md): 10,000 devices with valid credentials connecting to the
// embedded broker at once, with MQTT_DEVICE_AUTH=required, beside two baselines measured in the
// same run: the same fleet against a bare aedes broker (no hooks, no database: what the broker
// alone costs), and against the service with MQTT_DEVICE_AUTH=off (its login path without any
// credential check). Each service runs as its own process with an embedded PostgreSQL of its
// own; the fleet is a process of its own too (bench/connect-storm-fleet.ts).
//   node dist/bench/connect-storm.js [devices=10000] [chosen=0]
// `chosen`: how many of the devices get a client-chosen secret (salted slow hash) instead of a
// generated one. Every storm is run twice: cold (the service has cached nothing) and again
// after every device disconnected (a reconnect storm).
import { fork, spawn, type ChildProcess } from 'node:child_process';
import path from 'node:path';
import { projectRoot } from '../src/paths.js';
import { startBenchService, type BenchService } from './lib/harness.js';
import type { FleetConfig, StormResult } from './connect-storm-fleet.js';

const DEVICES = Number(process.argv[2] ?? 10_000);
const CHOSEN = Number(process.argv[3] ?? 0);
const TENANT = 'storm';
const CREATE_CONCURRENCY = 32;

async function seedDevices(svc: BenchService): Promise<string[]> {
  const { rows } = await svc.pool.query<{ id: string }>(`INSERT INTO templates (tenant, label) VALUES ($1, 'sensor') RETURNING id`, [
    TENANT,
  ]);
  const ids = Array.from({ length: DEVICES }, (_, i) => i.toString(16).padStart(6, '0'));
  await svc.pool.query(`INSERT INTO devices (tenant, id, label) SELECT $1, i, 'dev-' || i FROM unnest($2::text[]) AS i`, [TENANT, ids]);
  await svc.pool.query(`INSERT INTO device_templates (tenant, device_id, template_id) SELECT $1, i, $3 FROM unnest($2::text[]) AS i`, [
    TENANT,
    ids,
    rows[0]!.id,
  ]);
  return ids;
}

/** A token of the tenant (the admin creates a user in it). */
async function tenantToken(svc: BenchService): Promise<string> {
  const headers = { 'content-type': 'application/json', authorization: `Bearer ${svc.token}` };
  await fetch(`${svc.base}/auth/user`, {
    method: 'POST',
    headers,
    body: JSON.stringify({ username: 'storm', passwd: 'storm-pw', service: TENANT, profile: 'admin' }),
  });
  const res = await fetch(`${svc.base}/auth`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ username: 'storm', passwd: 'storm-pw' }),
  });
  return ((await res.json()) as { jwt: string }).jwt;
}

/** One credential a device through the API, CREATE_CONCURRENCY at a time; the secrets, and the time it took. */
async function createCredentials(svc: BenchService, ids: string[]): Promise<{ secrets: string[]; seconds: number }> {
  const token = await tenantToken(svc);
  const secrets = new Array<string>(ids.length);
  const started = performance.now();
  let next = 0;
  const worker = async () => {
    for (let i = next++; i < ids.length; i = next++) {
      const body = i < CHOSEN ? { type: 'password', secret: `chosen-secret-of-${ids[i]}` } : { type: 'password' };
      const res = await fetch(`${svc.base}/device/${ids[i]}/credentials`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
        body: JSON.stringify(body),
      });
      if (res.status !== 201) throw new Error(`credential of ${ids[i]}: ${res.status} ${await res.text()}`);
      secrets[i] = ((await res.json()) as { secret: string }).secret;
    }
  };
  await Promise.all(Array.from({ length: CREATE_CONCURRENCY }, worker));
  return { secrets, seconds: (performance.now() - started) / 1000 };
}

class Fleet {
  private constructor(private readonly proc: ChildProcess) {}

  static async start(cfg: FleetConfig): Promise<Fleet> {
    const proc = fork(path.join(projectRoot, 'dist/bench/connect-storm-fleet.js'), [], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    await new Promise<void>((resolve) => proc.once('message', () => resolve()));
    const fleet = new Fleet(proc);
    await fleet.ask('config', 'configured', { config: cfg });
    return fleet;
  }

  private ask<T>(type: string, answer: string, extra: object = {}): Promise<T> {
    return new Promise((resolve) => {
      const on = (m: { type: string }) => {
        if (m.type !== answer) return;
        this.proc.off('message', on);
        resolve(m as T);
      };
      this.proc.on('message', on);
      this.proc.send({ type, ...extra });
    });
  }

  storm = () => this.ask<StormResult>('storm', 'result');
  close = () => this.ask<unknown>('close', 'closed');
  stop = () => this.proc.kill();
}

const fmt = (r: StormResult) =>
  `${r.connected} of ${DEVICES} connected (${r.refused} refused, ${r.failed} failed), all within ${(r.allMs / 1000).toFixed(2)} s; CONNACK p50 ${r.p50Ms} ms, p99 ${r.p99Ms} ms`;

/** The fleet's two storms against `url`, each followed by every device disconnecting. */
async function storms(label: string, cfg: FleetConfig): Promise<void> {
  const fleet = await Fleet.start(cfg);
  try {
    for (const round of ['cold', 'reconnect']) {
      console.log(`${label}, ${round}: ${fmt(await fleet.storm())}`);
      await fleet.close();
      // Let the broker forget the closed sessions.
      await new Promise((r) => setTimeout(r, 2000));
    }
  } finally {
    fleet.stop();
  }
}

async function bare(): Promise<void> {
  const proc = spawn(process.execPath, [path.join(projectRoot, 'dist/bench/lib/bare-broker.js')], { stdio: ['ignore', 'pipe', 'inherit'] });
  const port = await new Promise<string>((resolve) => proc.stdout.once('data', (d: Buffer) => resolve(d.toString().trim().split(' ')[1]!)));
  try {
    const ids = Array.from({ length: DEVICES }, (_, i) => i.toString(16).padStart(6, '0'));
    await storms('bare aedes', { url: `mqtt://127.0.0.1:${port}`, tenant: TENANT, devices: ids.map((id) => ({ id, secret: 'x' })) });
  } finally {
    proc.kill('SIGTERM');
  }
}

async function run(mode: 'required' | 'off'): Promise<void> {
  const svc = await startBenchService({ MQTT_DEVICE_AUTH: mode });
  try {
    const ids = await seedDevices(svc);
    let secrets: Array<string | undefined> = ids.map(() => undefined);
    if (mode === 'required') {
      const made = await createCredentials(svc, ids);
      secrets = made.secrets;
      console.log(
        `${mode}: ${DEVICES} credentials created through the API in ${made.seconds.toFixed(1)} s (${Math.round(DEVICES / made.seconds)}/s, ${CHOSEN} client-chosen)`,
      );
    }
    await storms(mode, { url: svc.mqttUrl!, tenant: TENANT, devices: ids.map((id, i) => ({ id, secret: secrets[i] })) });
  } finally {
    await svc.stop();
  }
}

console.log(
  `connect storm, ${DEVICES} devices; load average ${(await import('node:os'))
    .loadavg()
    .map((l) => l.toFixed(1))
    .join(' ')}`,
);
await bare();
await run('off');
await run('required');
