// Device messaging, main-thread side: starts the ingest router thread (broker link, router,
// shard workers), turns its reports into metrics, and offers actuation publishing to the HTTP
// routes. If the router thread dies it is started again; unacknowledged messages are still
// with the broker (external) or with the devices (embedded), so nothing committed is lost
// and nothing acknowledged is missing.
import path from 'node:path';
import { existsSync } from 'node:fs';
import { Worker } from 'node:worker_threads';
import { ConfigError, type Config } from '../config.js';
import type { Logger } from '../log.js';
import type { Metrics } from '../metrics.js';
import { projectRoot } from '../paths.js';
import { BrokerUnavailable } from '../broker/link.js';
import { IngestMetrics } from './metrics.js';
import { INGEST_CONFIG_KEYS, type IngestSettings, type MainToRouter, type RouterToMain } from './protocol.js';

export const ROUTER_THREAD_FILE = path.join(projectRoot, 'dist/src/ingest/router-thread.js');

export interface Ingest {
  /** The embedded broker's port; undefined with MQTT_URL. */
  readonly mqttPort: number | undefined;
  /** Publishes QoS 1, not retained, to every topic; rejects with BrokerUnavailable. */
  publish(topics: string[], payload: string): Promise<void>;
  /** Flushes, commits, acknowledges, then closes the broker link and the workers. */
  stop(): Promise<void>;
}

export function ingestSettings(config: Config, databaseUrl: string): IngestSettings {
  const picked = Object.fromEntries(INGEST_CONFIG_KEYS.map((key) => [key, config[key]])) as Pick<Config, (typeof INGEST_CONFIG_KEYS)[number]>;
  return { ...picked, databaseUrl };
}

export async function startIngest(opts: { config: Config; databaseUrl: string; metrics: Metrics; log: Logger }): Promise<Ingest> {
  const { config, log } = opts;
  if (!existsSync(ROUTER_THREAD_FILE)) throw new Error(`${ROUTER_THREAD_FILE} is missing; run "npm run build" first`);
  const settings = ingestSettings(config, opts.databaseUrl);
  const metrics = new IngestMetrics(opts.metrics);
  const waiting = new Map<number, { resolve: () => void; reject: (err: Error) => void; timer: NodeJS.Timeout }>();
  let nextRequest = 1;
  let worker: Worker | undefined;
  let ready = false;
  let stopping = false;
  let mqttPort: number | undefined;
  let onStopped: (() => void) | undefined;

  const launch = () =>
    new Promise<void>((resolve, reject) => {
      const w = new Worker(ROUTER_THREAD_FILE, { workerData: settings });
      worker = w;
      let started = false;
      w.on('message', (m: RouterToMain) => {
        switch (m.type) {
          case 'ready':
            started = true;
            ready = true;
            mqttPort = m.mqttPort;
            resolve();
            break;
          case 'failed':
            reject(m.configVariable ? new ConfigError(m.configVariable, m.error) : new Error(`ingest could not start: ${m.error}`));
            void w.terminate();
            break;
          case 'metrics':
            metrics.apply(m.delta);
            break;
          case 'published': {
            const req = waiting.get(m.requestId);
            if (!req) break;
            waiting.delete(m.requestId);
            clearTimeout(req.timer);
            if (m.error) req.reject(new BrokerUnavailable(m.error));
            else req.resolve();
            break;
          }
          case 'stopped':
            onStopped?.();
            break;
        }
      });
      w.on('error', (err) => log.error('ingest router thread failed', { error: err }));
      w.on('exit', (code) => {
        ready = false;
        for (const [id, req] of waiting) {
          clearTimeout(req.timer);
          req.reject(new BrokerUnavailable('the ingest router stopped'));
          waiting.delete(id);
        }
        if (!started) {
          reject(new Error(`the ingest router thread exited during start (code ${code})`));
          return;
        }
        if (!stopping) {
          log.error('ingest router thread exited; starting it again', { code });
          setTimeout(() => launch().catch((err: Error) => log.error('ingest restart failed', { error: err.message })), 1000).unref();
        }
      });
    });

  await launch();

  return {
    get mqttPort() {
      return mqttPort;
    },
    publish(topics, payload) {
      if (!worker || !ready) return Promise.reject(new BrokerUnavailable('the ingest router is not running'));
      const requestId = nextRequest++;
      const w = worker;
      return new Promise<void>((resolve, reject) => {
        const timer = setTimeout(() => {
          waiting.delete(requestId);
          reject(new BrokerUnavailable('the broker did not acknowledge in time'));
        }, config.actuationTimeoutMs + 500);
        waiting.set(requestId, { resolve, reject, timer });
        w.postMessage({ type: 'publish', requestId, topics, payload } satisfies MainToRouter);
      });
    },
    async stop() {
      stopping = true;
      const w = worker;
      if (!w) return;
      const budget = Math.max(500, Math.floor(config.shutdownTimeoutMs / 2));
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, budget + 2000);
        onStopped = () => {
          clearTimeout(timer);
          resolve();
        };
        w.postMessage({ type: 'stop', timeoutMs: budget } satisfies MainToRouter);
      });
      await w.terminate();
    },
  };
}
