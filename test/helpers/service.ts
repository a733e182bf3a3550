// Test helpers: a fresh database per test file, the service started in-process against it
// (or spawned as a real process when a test needs signals or restarts), a small HTTP client,
// and users of fresh tenants.
import { spawn, type ChildProcess } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { afterAll, afterEach, beforeAll, inject } from 'vitest';
import { readConfig } from '../../src/config.js';
import { createLogger } from '../../src/log.js';
import { startService, type Service } from '../../src/service.js';
import { projectRoot } from '../../src/paths.js';
import type { TokenAnswer } from './api.js';

let dbCounter = 0;

/** Creates an empty database for this test file and returns its URL. */
export async function freshDatabase(): Promise<string> {
  const admin = inject('adminDatabaseUrl');
  const name = `dr_test_${inject('runId')}_${process.pid}_${++dbCounter}_${crypto.randomBytes(3).toString('hex')}`;
  const client = new pg.Client({ connectionString: admin });
  await client.connect();
  await client.query(`CREATE DATABASE "${name}"`);
  await client.end();
  const url = new URL(admin);
  url.pathname = '/' + name;
  return url.toString();
}

export async function tempDir(prefix = 'dr-test-'): Promise<string> {
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), prefix));
  await fs.chmod(dir, 0o755);
  return dir;
}

/** Environment for a service under test: fresh database, the run's broker, free ports. */
export async function testEnv(overrides: Record<string, string | undefined> = {}): Promise<Record<string, string | undefined>> {
  const clientId = `dr-test-${crypto.randomBytes(4).toString('hex')}`;
  return {
    DATABASE_URL: await freshDatabase(),
    MQTT_URL: inject('mqttUrl'),
    PORT: '0',
    INTERNAL_PORT: '0',
    HOST: '127.0.0.1',
    MQTT_HOST: '127.0.0.1',
    MQTT_PORT: '0',
    DATA_DIR: await tempDir(),
    ADMIN_PASSWORD: 'admin',
    PSK_ENCRYPTION_KEY: crypto.randomBytes(32).toString('hex'),
    LOG_LEVEL: process.env.TEST_LOG_LEVEL ?? 'silent',
    MQTT_CLIENT_ID: clientId,
    // Test files share the run's broker: each service its own share group (its own deployment).
    MQTT_SHARE_GROUP: clientId,
    // Test services come and go: their broker sessions (and what is queued for them) expire soon.
    MQTT_SESSION_EXPIRY_SECONDS: '120',
    // DATABASE_URL (the run's server) would make `required` the default; the suite's device
    // tests are written for the first session's mode, where a device without credentials connects.
    MQTT_DEVICE_AUTH: 'optional',
    ...overrides,
  };
}

export interface TestService {
  service: Service;
  env: Record<string, string | undefined>;
  /** Public API base URL, e.g. http://127.0.0.1:34567 */
  base: string;
  /** Internal API base URL. */
  internal: string;
  stop(): Promise<void>;
}

/** Starts the service in this process. Remember to `stop()` it in afterAll. */
export async function startTestService(overrides: Record<string, string | undefined> = {}): Promise<TestService> {
  const env = await testEnv(overrides);
  const config = readConfig(env);
  const service = await startService(config, createLogger(config.logLevel, { test: true }, { format: config.logFormat }));
  return {
    service,
    env,
    base: `http://127.0.0.1:${service.publicPort}`,
    internal: `http://127.0.0.1:${service.internalPort}`,
    stop: () => service.stop(),
  };
}

/**
 * In-process services that a test starts itself, each stopped after the test that started it
 * (every service holds a dozen database connections), whether it passed or not.
 */
export function servicesPerTest() {
  const running: TestService[] = [];
  afterEach(async () => {
    for (const s of running.splice(0)) await s.stop().catch(() => undefined);
  });
  return {
    start: async (env: Record<string, string | undefined>): Promise<TestService> => {
      const s = await startTestService(env);
      running.push(s);
      return s;
    },
    /** Stops one before the test ends (its failure fails the test). */
    stop: async (s: TestService): Promise<void> => {
      running.splice(running.indexOf(s), 1);
      await s.stop();
    },
    /** Stops every one still running (a failure fails the test). */
    stopAll: async (): Promise<void> => {
      for (const s of running.splice(0)) await s.stop();
    },
  };
}

/** An answer; `body` is the parsed JSON (else the text) cast to `T`: the test's assertions check it. */
export interface ApiResponse<T = unknown> {
  status: number;
  headers: Headers;
  body: T;
  text: string;
}

/** One HTTP request; JSON bodies are sent with `application/json` unless headers say otherwise. */
export async function http<T = unknown>(
  method: string,
  url: string,
  opts: { token?: string; body?: unknown; rawBody?: string | Buffer; headers?: Record<string, string> } = {},
): Promise<ApiResponse<T>> {
  const headers: Record<string, string> = { ...(opts.headers ?? {}) };
  if (opts.token) headers.authorization = `Bearer ${opts.token}`;
  let body: string | Buffer | undefined = opts.rawBody;
  if (opts.body !== undefined) {
    body = JSON.stringify(opts.body);
    headers['content-type'] ??= 'application/json';
  }
  const res = await fetch(url, { method, headers, body });
  const text = await res.text();
  let parsed: unknown = undefined;
  try {
    parsed = text ? JSON.parse(text) : undefined;
  } catch {
    parsed = text;
  }
  return { status: res.status, headers: res.headers, body: parsed as T, text };
}

/** A token for `username`/`passwd` (admin/admin by default). */
export async function login(base: string, username = 'admin', passwd = 'admin'): Promise<string> {
  const res = await http<TokenAnswer>('POST', `${base}/auth`, { body: { username, passwd } });
  if (res.status !== 200) throw new Error(`login ${username} failed: ${res.status} ${res.text}`);
  return res.body.jwt;
}

/** Creates a user in `tenant` through the admin API and returns a token for it. */
export async function tenantToken(base: string, adminToken: string, tenant: string, profile = 'user'): Promise<string> {
  const username = `${tenant}-${crypto.randomBytes(4).toString('hex')}`;
  const res = await http('POST', `${base}/auth/user`, {
    token: adminToken,
    body: { username, passwd: 'secret-pw', service: tenant, profile },
  });
  if (res.status !== 201) throw new Error(`create user failed: ${res.status} ${res.text}`);
  return login(base, username, 'secret-pw');
}

type Env = Record<string, string | undefined>;

export interface TenantUser {
  tenant: string;
  token: string;
}

/** A user of a tenant no other test uses (`<prefix>-<6 hex>`), created by the admin. */
export async function freshTenant(base: string, adminToken: string, prefix: string, profile = 'user'): Promise<TenantUser> {
  const tenant = `${prefix}-${crypto.randomBytes(3).toString('hex')}`;
  return { tenant, token: await tenantToken(base, adminToken, tenant, profile) };
}

/** The in-process service of a test file; `token` is the admin user's (tenant `admin`). */
export interface ServiceForFile extends TestService {
  readonly token: string;
  /** A user of a fresh tenant (`<prefix>-<6 hex>`). */
  freshTenant(prefix: string, profile?: string): Promise<TenantUser>;
}

/**
 * Starts the service (fresh database) before the calling file's (or describe block's) tests and
 * logs the admin in; stops it after them. Its fields can be read from the hooks registered after
 * it (beforeAll hooks run in order) and from the tests. `overrides` as a function is read when
 * the service starts, for settings known only then (a broker started by an earlier hook).
 */
export function useService(overrides: Env | (() => Env) = {}): ServiceForFile {
  let running: TestService | undefined;
  let adminToken: string | undefined;
  const started = (): TestService => {
    if (!running) throw new Error('useService(): the service starts in beforeAll; read it from hooks or tests');
    return running;
  };
  beforeAll(async () => {
    running = await startTestService(typeof overrides === 'function' ? overrides() : overrides);
    adminToken = await login(running.base);
  });
  afterAll(() => running?.stop());
  return {
    get service() {
      return started().service;
    },
    get env() {
      return started().env;
    },
    get base() {
      return started().base;
    },
    get internal() {
      return started().internal;
    },
    get token() {
      started();
      return adminToken!;
    },
    stop: () => started().stop(),
    freshTenant: (prefix, profile) => freshTenant(started().base, adminToken!, prefix, profile),
  };
}

export interface SpawnedService {
  child: ChildProcess;
  /** Every stdout/stderr line so far. */
  output: string[];
  /** Resolves with the exit code. */
  exited: Promise<number | null>;
  /** Waits until a log line matches. */
  waitFor(pattern: RegExp, timeoutMs?: number): Promise<string>;
}

/**
 * Runs the compiled service (`node dist/src/main.js`) as its own process; `processGroup`: in a
 * process group of its own, as a terminal runs a command (Ctrl-C signals the whole group).
 */
export function spawnService(env: Record<string, string | undefined>, opts: { processGroup?: boolean } = {}): SpawnedService {
  const child = spawn(process.execPath, [path.join(projectRoot, 'dist/src/main.js')], {
    env: { PATH: process.env.PATH, HOME: process.env.HOME, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: opts.processGroup ?? false,
  });
  const output: string[] = [];
  const waiters: Array<{ pattern: RegExp; resolve: (line: string) => void }> = [];
  const onLine = (line: string) => {
    output.push(line);
    for (const w of [...waiters]) {
      if (w.pattern.test(line)) {
        waiters.splice(waiters.indexOf(w), 1);
        w.resolve(line);
      }
    }
  };
  for (const stream of [child.stdout, child.stderr]) {
    let buf = '';
    stream.on('data', (chunk: Buffer) => {
      buf += chunk.toString('utf8');
      let i: number;
      while ((i = buf.indexOf('\n')) >= 0) {
        onLine(buf.slice(0, i));
        buf = buf.slice(i + 1);
      }
    });
    stream.on('end', () => buf && onLine(buf));
  }
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  return {
    child,
    output,
    exited,
    waitFor(pattern, timeoutMs = 30_000) {
      const seen = output.find((l) => pattern.test(l));
      if (seen) return Promise.resolve(seen);
      return new Promise((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`timed out waiting for ${pattern}; output:\n${output.join('\n')}`)), timeoutMs);
        waiters.push({
          pattern,
          resolve: (line) => {
            clearTimeout(timer);
            resolve(line);
          },
        });
      });
    },
  };
}

/** The address a listener logged, e.g. `{"msg":"public HTTP API listening","address":"http://..."}`. */
export function loggedAddress(line: string): string {
  return (JSON.parse(line) as { address: string }).address;
}

/** A spawned service that said it is ready, with the addresses its listeners logged. */
export interface ReadyService {
  svc: SpawnedService;
  base: string;
  internal: string;
}

/** Spawns services for the calling file; each still running after the file's tests is killed (SIGKILL). */
export function useSpawnedServices() {
  const spawned: SpawnedService[] = [];
  afterAll(() => {
    for (const s of spawned) if (s.child.exitCode === null && s.child.signalCode === null) s.child.kill('SIGKILL');
  });
  const spawnOne = (env: Record<string, string | undefined>): SpawnedService => {
    const s = spawnService(env);
    spawned.push(s);
    return s;
  };
  return {
    spawn: spawnOne,
    /** Spawns with `env` and waits until it is ready (`readyMs` at most). */
    async ready(env: Record<string, string | undefined>, readyMs = 60_000): Promise<ReadyService> {
      const svc = spawnOne(env);
      await svc.waitFor(/"msg":"ready"/, readyMs);
      const base = loggedAddress(await svc.waitFor(/public HTTP API listening/));
      const internal = loggedAddress(await svc.waitFor(/internal HTTP API listening/));
      return { svc, base, internal };
    },
  };
}

/** Zero-setup environment: embedded PostgreSQL under a fresh DATA_DIR and the embedded broker, free ports. */
export async function zeroSetupEnv(extra: Record<string, string> = {}): Promise<Record<string, string>> {
  return { DATA_DIR: await tempDir(), PORT: '0', INTERNAL_PORT: '0', HOST: '127.0.0.1', MQTT_PORT: '0', MQTT_HOST: '127.0.0.1', ...extra };
}

/** SIGTERM, then the exit code and how long the process took to exit. */
export async function terminate(svc: SpawnedService): Promise<{ code: number | null; ms: number }> {
  const t0 = Date.now();
  svc.child.kill('SIGTERM');
  const code = await svc.exited;
  return { code, ms: Date.now() - t0 };
}

/**
 * The message of a failed start: the process's last output line, which must be one JSON log line
 * (the default format off a terminal) at level error.
 */
export function startFailure(svc: SpawnedService): string {
  const last = svc.output.filter((l) => l.trim()).at(-1) ?? '';
  let line: { level?: unknown; msg?: unknown };
  try {
    line = JSON.parse(last) as typeof line;
  } catch {
    throw new Error(`the last line of a failed start is not a JSON log line: ${last}`);
  }
  if (line.level !== 'error' || typeof line.msg !== 'string') throw new Error(`not a start failure line: ${last}`);
  return line.msg;
}
