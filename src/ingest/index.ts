// Device messaging, main-thread side: starts the ingest router thread (broker link, router,
// shard workers), turns its reports into metrics, and offers actuation publishing to the HTTP
// routes. If the router thread dies it is started again; unacknowledged messages are still
// with the broker (external) or with the devices (embedded), so nothing committed is lost
// and nothing acknowledged is missing.
import crypto from 'node:crypto';
import path from 'node:path';
import { existsSync } from 'node:fs';
import { Worker } from 'node:worker_threads';
import { ingestThreadLimits } from '../v8-heap.js';
import { ConfigError, type Config } from '../config.js';
import type { Logger } from '../log.js';
import type { Metrics } from '../metrics.js';
import { projectRoot } from '../paths.js';
import { BrokerUnavailable } from '../errors.js';
import type { LinkState } from '../broker/link.js';
import { until } from '../shutdown.js';
import type { LoginCheck } from '../registry/credentials/logins.js';
import { IngestMetrics } from './metrics.js';
import { INGEST_CONFIG_KEYS, type IngestSettings, type MainToRouter, type RouterToMain } from './protocol.js';

/** How long the router thread may take after its drain to end the broker sessions and stop its workers. */
const CLOSE_MS = 1000;

const ROUTER_THREAD_FILE = path.join(projectRoot, 'dist/src/ingest/router-thread.js');

/** What readiness needs to know of ingest (src/health.ts). */
export interface IngestStatus {
  /** The broker link's state as last reported; undefined while the router thread is not running. */
  link: LinkState | undefined;
  /** Messages taken and not yet acknowledged. */
  pending: number;
  /** Epoch ms: the last time a message was acknowledged, or nothing was pending. */
  progressAt: number;
}

export interface Ingest {
  status(): IngestStatus;
  /** The embedded broker's port; undefined with MQTT_URL. */
  readonly mqttPort: number | undefined;
  /** The embedded broker's TLS port (MQTT_TLS_CERT); undefined otherwise. */
  readonly mqttTlsPort: number | undefined;
  /** Publishes QoS 1, not retained, to every topic; rejects with BrokerUnavailable. */
  publish(topics: string[], payload: string): Promise<void>;
  /**
   * Stops taking messages, commits and acknowledges what was taken (until `drainUntil`, epoch
   * ms; the rest stays with the broker or the devices, and is delivered again), then ends the
   * broker sessions and the workers. Called again, the same promise.
   */
  stop(drainUntil: number): Promise<void>;
}

function ingestSettings(config: Config, databaseUrl: string): IngestSettings {
  const picked = Object.fromEntries(INGEST_CONFIG_KEYS.map((key) => [key, config[key]])) as Pick<
    Config,
    (typeof INGEST_CONFIG_KEYS)[number]
  >;
  return { ...picked, databaseUrl, instanceId: crypto.randomUUID() };
}

export async function startIngest(opts: {
  config: Config;
  databaseUrl: string;
  metrics: Metrics;
  logins: LoginCheck;
  log: Logger;
}): Promise<Ingest> {
  if (!existsSync(ROUTER_THREAD_FILE)) throw new Error(`${ROUTER_THREAD_FILE} is missing; run "npm run build" first`);
  const thread = new RouterThread(
    opts.config,
    ingestSettings(opts.config, opts.databaseUrl),
    new IngestMetrics(opts.metrics),
    opts.logins,
    opts.log,
  );
  await thread.launch();
  return thread;
}

const FIRST_RESTART_MS = 1000;
const MAX_RESTART_MS = 30_000;
/** A thread that ran this long before it died was stable: its restart waits the first delay again. */
const STABLE_MS = 60_000;

/** One start of the router thread: settled by its first report ('ready' or 'failed') or its exit. */
interface Launch {
  started: boolean;
  resolve(): void;
  reject(err: Error): void;
}

/** The ingest router thread, seen from the main thread; started again if it dies. */
class RouterThread implements Ingest {
  private worker: Worker | undefined;
  private ready = false;
  private stopping = false;
  private port: number | undefined;
  private tlsPort: number | undefined;
  private onStopped: (() => void) | undefined;
  private stopped: Promise<void> | undefined;
  private link: LinkState | undefined;
  private pending = 0;
  private progressAt = Date.now();
  private readonly requests = new PublishRequests();
  /** The wait before the next restart: doubles with every failed one, back to the first after a stable run. */
  private restartDelay = FIRST_RESTART_MS;
  private startedAt = 0;

  constructor(
    private readonly config: Config,
    private readonly settings: IngestSettings,
    private readonly metrics: IngestMetrics,
    private readonly logins: LoginCheck,
    private readonly log: Logger,
  ) {}

  get mqttPort(): number | undefined {
    return this.port;
  }

  status(): IngestStatus {
    return { link: this.ready ? this.link : undefined, pending: this.pending, progressAt: this.progressAt };
  }

  get mqttTlsPort(): number | undefined {
    return this.tlsPort;
  }

  /** Starts the thread; resolves once its broker link runs, rejects if it cannot start. */
  launch(): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      const w = new Worker(ROUTER_THREAD_FILE, {
        workerData: this.settings,
        resourceLimits: ingestThreadLimits(this.settings.ingestThreadYoungGenerationMb),
      });
      this.worker = w;
      const launch: Launch = { started: false, resolve, reject };
      this.startedAt = Date.now();
      w.on('message', (m: RouterToMain) => this.onReport(w, m, launch));
      w.on('error', (err) => this.log.error('ingest router thread failed', { error: err }));
      w.on('exit', (code) => this.onExit(code, launch));
    });
  }

  publish(topics: string[], payload: string): Promise<void> {
    const w = this.worker;
    if (!w || !this.ready) return Promise.reject(new BrokerUnavailable('the ingest router is not running'));
    return this.requests.add(this.config.actuationTimeoutMs + 500, (requestId) =>
      w.postMessage({ type: 'publish', requestId, topics, payload } satisfies MainToRouter),
    );
  }

  stop(drainUntil: number): Promise<void> {
    return (this.stopped ??= this.stopThread(drainUntil));
  }

  private async stopThread(drainUntil: number): Promise<void> {
    this.stopping = true;
    const w = this.worker;
    if (!w) return;
    // After the drain, the thread closes the broker link and its workers: a little more time.
    const stopped = new Promise<void>((resolve) => {
      this.onStopped = resolve;
      w.postMessage({ type: 'stop', timeoutMs: Math.max(0, drainUntil - Date.now()) } satisfies MainToRouter);
    });
    await until(stopped, drainUntil + CLOSE_MS);
    await w.terminate();
  }

  private onReport(w: Worker, m: RouterToMain, launch: Launch): void {
    switch (m.type) {
      case 'ready':
        launch.started = true;
        this.ready = true;
        this.port = m.mqttPort;
        this.tlsPort = m.mqttTlsPort;
        launch.resolve();
        break;
      case 'login':
        // The embedded broker asks; the registry answers (the password is never logged).
        this.logins.check(m.login).then(
          (verdict) => w.postMessage({ type: 'login-verdict', requestId: m.requestId, verdict } satisfies MainToRouter),
          (err: Error) => w.postMessage({ type: 'login-verdict', requestId: m.requestId, error: err.message } satisfies MainToRouter),
        );
        break;
      case 'login-settled':
        this.logins.settle(m.device, m.certificate, m.outcome);
        break;
      case 'standing':
        this.logins.standing(m.logins).then(
          (standing) => w.postMessage({ type: 'login-standing', requestId: m.requestId, standing } satisfies MainToRouter),
          (err: Error) => w.postMessage({ type: 'login-standing', requestId: m.requestId, error: err.message } satisfies MainToRouter),
        );
        break;
      case 'failed':
        launch.reject(m.configVariable ? new ConfigError(m.configVariable, m.error) : new Error(`ingest could not start: ${m.error}`));
        void w.terminate();
        break;
      case 'metrics':
        this.metrics.apply(m.delta);
        this.metrics.link(m.link);
        this.link = m.link;
        this.pending = m.delta.queueDepth.reduce((a, b) => a + b, 0);
        // Progress is a commit: QoS 0 messages dropped for overload are acknowledged too, and
        // would hide a stalled database from /health/ready.
        if (m.delta.messagesCommitted > 0 || this.pending === 0) this.progressAt = Date.now();
        break;
      case 'published':
        this.requests.answer(m.requestId, m.error);
        break;
      case 'stopped':
        this.onStopped?.();
        break;
    }
  }

  /** The thread is gone: its publish requests fail; unless it never started or we are stopping, it starts again. */
  private onExit(code: number, launch: Launch): void {
    this.ready = false;
    this.link = undefined;
    this.metrics.link(undefined);
    this.requests.failAll('the ingest router stopped');
    if (!launch.started) {
      launch.reject(new Error(`the ingest router thread exited during start (code ${code})`));
      return;
    }
    if (!this.stopping) {
      if (Date.now() - this.startedAt >= STABLE_MS) this.restartDelay = FIRST_RESTART_MS;
      this.log.error('ingest router thread exited; starting it again', { code, inMs: this.restartDelay });
      this.restartLater();
    }
  }

  /** Starts the thread again after the current delay, and again (backing off) for as long as that fails. */
  private restartLater(): void {
    const delay = this.restartDelay;
    this.restartDelay = Math.min(delay * 2, MAX_RESTART_MS);
    setTimeout(() => {
      if (this.stopping) return;
      this.launch().catch((err: Error) => {
        if (this.stopping) return;
        this.log.error('ingest restart failed; trying again', { error: err.message, inMs: this.restartDelay });
        this.restartLater();
      });
    }, delay).unref();
  }
}

/** Actuation publish requests waiting for the router thread's answer. */
class PublishRequests {
  private readonly waiting = new Map<number, { resolve: () => void; reject: (err: Error) => void; timer: NodeJS.Timeout }>();
  private next = 1;

  /** Sends a request under a new id; settled by its answer, or rejected after `timeoutMs`. */
  add(timeoutMs: number, send: (requestId: number) => void): Promise<void> {
    const requestId = this.next++;
    return new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiting.delete(requestId);
        reject(new BrokerUnavailable('the broker did not acknowledge in time'));
      }, timeoutMs);
      this.waiting.set(requestId, { resolve, reject, timer });
      send(requestId);
    });
  }

  answer(requestId: number, error: string | undefined): void {
    const req = this.waiting.get(requestId);
    if (!req) return;
    this.waiting.delete(requestId);
    clearTimeout(req.timer);
    if (error) req.reject(new BrokerUnavailable(error));
    else req.resolve();
  }

  failAll(message: string): void {
    for (const [id, req] of this.waiting) {
      clearTimeout(req.timer);
      req.reject(new BrokerUnavailable(message));
      this.waiting.delete(id);
    }
  }
}
