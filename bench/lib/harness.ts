// The service under benchmark, run as its own process (`node dist/src/main.js`) against an
// embedded PostgreSQL that the benchmark starts in a temporary directory (so it can seed rows
// directly), with the embedded broker on a free port. The bare baseline server is a process too.
import { spawn, type ChildProcess } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { subscriberClientId } from '../../src/broker/external.js';
import { endSession } from '../../src/broker/session-drain.js';
import { readConfig } from '../../src/config.js';
import { startEmbeddedDatabase } from '../../src/db/embedded.js';
import { createLogger } from '../../src/log.js';
import { projectRoot } from '../../src/paths.js';

export interface BenchService {
  base: string;
  internal: string;
  /** The service process (for its RSS and CPU). */
  pid: number;
  /** The embedded broker's address; undefined with MQTT_URL. */
  mqttUrl: string | undefined;
  pool: pg.Pool;
  token: string;
  stop(): Promise<void>;
}

function waitForLine(child: ChildProcess, pattern: RegExp, timeoutMs = 120_000): Promise<string> {
  return new Promise((resolve, reject) => {
    let buf = '';
    const timer = setTimeout(() => reject(new Error(`timed out waiting for ${pattern}:\n${buf}`)), timeoutMs);
    const onData = (chunk: Buffer) => {
      buf += chunk.toString('utf8');
      for (const line of buf.split('\n')) {
        if (pattern.test(line)) {
          clearTimeout(timer);
          child.stdout!.off('data', onData);
          resolve(line);
          return;
        }
      }
    };
    child.stdout!.on('data', onData);
    child.once('exit', (code) => reject(new Error(`process exited (${code}) before ${pattern}:\n${buf}`)));
  });
}

/** BENCH_SVC_<NAME>=value of the benchmark's environment, as <NAME>=value for the service under test (e.g. BENCH_SVC_DEVICE_CACHE_SIZE=0). */
export function benchServiceEnv(): Record<string, string> {
  return Object.fromEntries(
    Object.entries(process.env).flatMap(([k, v]) => (k.startsWith('BENCH_SVC_') && v !== undefined ? [[k.slice(10), v]] : [])),
  );
}

/**
 * Settings of a service under benchmark that subscribes on a shared broker (the machine's
 * Mosquitto): a client id and a share group of its own, so that no other deployment of the
 * default group (`device-registry`) on that broker takes a share of the benchmark's messages or
 * hands it theirs. `endSessions()` after the service stopped: the last instance of a group keeps
 * its persistent sessions (the broker queues for them until they expire); the benchmark's are
 * ended instead.
 */
export function externalBrokerService(url: string, prefix: string): { env: Record<string, string>; endSessions(): Promise<void> } {
  const clientId = `${prefix}-${crypto.randomBytes(3).toString('hex')}`;
  const connections = Number(benchServiceEnv().MQTT_SUBSCRIBER_CONNECTIONS ?? 8);
  return {
    env: { MQTT_URL: url, MQTT_CLIENT_ID: clientId, MQTT_SHARE_GROUP: clientId },
    async endSessions() {
      for (let n = 0; n < connections; n++) await endSession(url, subscriberClientId(clientId, n), 5).catch(() => undefined);
    },
  };
}

/**
 * The public API's address of a service process (stdout piped), once it logged `ready`; its
 * warnings and errors are shown on stderr meanwhile. Rejects if the process exits first.
 */
export function readyAddress(proc: ChildProcess): Promise<string> {
  return new Promise<string>((resolve, reject) => {
    let buf = '';
    let address: string | undefined;
    proc.stdout!.on('data', (d: Buffer) => {
      buf += d.toString();
      for (const line of buf.split('\n')) {
        if (line.includes('public HTTP API listening')) address = (JSON.parse(line) as { address: string }).address;
        if (line.includes('"msg":"ready"') && address) resolve(address);
        if (line.includes('"level":"warn"') || line.includes('"level":"error"')) process.stderr.write('  service: ' + line + '\n');
      }
      buf = buf.slice(buf.lastIndexOf('\n') + 1);
    });
    proc.once('exit', (code) => reject(new Error(`service exited with ${code}`)));
  });
}

/** A token of `bench-user`, a user of `tenant` made with the admin's token (a 409 when it exists already is fine). */
export async function benchUserToken(base: string, tenant: string): Promise<string> {
  const auth = async (username: string, passwd: string) =>
    (
      (await (
        await fetch(`${base}/auth`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ username, passwd }),
        })
      ).json()) as { jwt: string }
    ).jwt;
  await fetch(`${base}/auth/user`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${await auth('admin', 'admin')}` },
    body: JSON.stringify({ username: 'bench-user', passwd: 'bench-pass', service: tenant, profile: 'user' }),
  });
  return auth('bench-user', 'bench-pass');
}

/** `nodeArgs`: extra node flags for the service process, e.g. `--cpu-prof` to profile it. */
export async function startBenchService(env: Record<string, string> = {}, nodeArgs: string[] = []): Promise<BenchService> {
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'dr-bench-'));
  await fs.chmod(dir, 0o755);
  // The embedded server's settings as the service would start it (EMBEDDED_PG_SETTINGS applies).
  const settings = readConfig({ EMBEDDED_PG_SETTINGS: process.env.EMBEDDED_PG_SETTINGS }).embeddedPgSettings;
  const db = await startEmbeddedDatabase({ dataDir: dir, port: undefined, settings, log: createLogger('warn') });
  const child = spawn(process.execPath, [...nodeArgs, path.join(projectRoot, 'dist/src/main.js')], {
    env: {
      PATH: process.env.PATH,
      HOME: process.env.HOME,
      DATABASE_URL: db.url,
      PSK_ENCRYPTION_KEY: crypto.randomBytes(32).toString('hex'),
      ADMIN_PASSWORD: 'admin',
      DATA_DIR: dir,
      HOST: '127.0.0.1',
      PORT: '0',
      INTERNAL_PORT: '0',
      MQTT_HOST: '127.0.0.1',
      MQTT_PORT: '0',
      LOG_LEVEL: 'info',
      // As the image and `npm start` run it (fewer glibc arenas: docs/operations.md §3).
      MALLOC_ARENA_MAX: '2',
      ...benchServiceEnv(),
      ...env,
    },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const addressOf = (line: string) => (JSON.parse(line) as { address: string }).address;
  const publicLine = waitForLine(child, /public HTTP API listening/);
  const internalLine = waitForLine(child, /internal HTTP API listening/);
  const mqttLine = env.MQTT_URL ? undefined : waitForLine(child, /^(?=.*embedded MQTT broker listening)(?=.*"address":"mqtt:\/\/)/);
  let base: string;
  let internal: string;
  let mqtt: string | undefined;
  try {
    await waitForLine(child, /"msg":"ready"/);
    base = addressOf(await publicLine);
    internal = addressOf(await internalLine);
    mqtt = mqttLine && addressOf(await mqttLine);
  } catch (err) {
    child.kill('SIGKILL');
    await db.stop();
    throw err;
  }
  child.stdout.resume();
  const res = await fetch(`${base}/auth`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ username: 'admin', passwd: 'admin' }),
  });
  const { jwt } = (await res.json()) as { jwt: string };
  const pool = new pg.Pool({ connectionString: db.url, max: 4 });
  return {
    base,
    internal,
    pid: child.pid!,
    mqttUrl: mqtt,
    pool,
    token: jwt,
    async stop() {
      await pool.end();
      // A service that died meanwhile has no exit left to wait for (waiting would hang the
      // benchmark with its database still running).
      if (child.exitCode === null && child.signalCode === null) {
        child.kill('SIGTERM');
        await new Promise((r) => child.once('exit', r));
      }
      await db.stop();
      await fs.rm(dir, { recursive: true, force: true });
    },
  };
}

/** Starts the bare baseline server as its own process, answering `answers` (path -> JSON text). */
export async function startBareProcess(answers: Record<string, string>): Promise<{ base: string; stop(): Promise<void> }> {
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'dr-bare-'));
  const file = path.join(dir, 'answers.json');
  await fs.writeFile(file, JSON.stringify(answers));
  const child = spawn(process.execPath, [path.join(projectRoot, 'dist/bench/lib/bare-server.js'), file], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const line = await waitForLine(child, /^listening \d+/);
  child.stdout.resume();
  return {
    base: `http://127.0.0.1:${line.split(' ')[1]}`,
    async stop() {
      child.kill('SIGTERM');
      await new Promise((r) => child.once('exit', r));
      await fs.rm(dir, { recursive: true, force: true });
    },
  };
}
