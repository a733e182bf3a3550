// Wires the service: database (embedded unless DATABASE_URL) -> migrations -> first admin ->
// broker (embedded unless MQTT_URL) -> HTTP listeners. `stop()` undoes it in reverse order.
import crypto from 'node:crypto';
import type pg from 'pg';
import type { Config } from './config.js';
import type { Logger } from './log.js';
import { startEmbeddedDatabase, type EmbeddedDatabase } from './db/embedded.js';
import { createPool, endPool } from './db/pool.js';
import { loadMigrations, migrate } from './db/migrate.js';
import { Readiness } from './health.js';
import { ensureAdmin } from './auth/bootstrap.js';
import { Tokens } from './auth/tokens.js';
import { loadOrCreateKey, prepareDataDir } from './secrets.js';
import { createMetrics, type Metrics } from './metrics.js';
import { startIngest } from './ingest/index.js';
import { startHistoryMaintenance } from './history/maintenance.js';
import { ActuationService } from './registry/actuation/service.js';
import { apiRoutes } from './api.js';
import { bindRoutes } from './http/route.js';
import { startHttp, type HttpServer } from './http/server.js';
import type { Route } from './http/types.js';
import { RegistryEvents } from './registry/events.js';
import { TemplateService } from './registry/templates/service.js';
import { DeviceService } from './registry/devices/service.js';
import { KeySealer } from './registry/psk/sealer.js';
import { PskService } from './registry/psk/service.js';
import { ServedOpenApi } from './openapi/served.js';
import { shutdownClock, until, type ShutdownClock } from './shutdown.js';
import { CredentialHasher } from './registry/credentials/hashing.js';
import { DeviceLogins } from './registry/credentials/logins.js';
import { LoginMetrics } from './registry/credentials/metrics.js';
import { CredentialService } from './registry/credentials/service.js';
import { DynamicSecurity } from './broker/dynamic-security.js';

export interface Service {
  config: Config;
  pool: pg.Pool;
  metrics: Metrics;
  databaseUrl: string;
  events: RegistryEvents;
  publicPort: number;
  internalPort: number;
  /** The embedded broker's port; undefined with MQTT_URL (or MQTT_PLAIN=false). */
  mqttPort: number | undefined;
  /** The embedded broker's TLS port; undefined without MQTT_TLS_CERT. */
  mqttTlsPort: number | undefined;
  /** Every route served (src/api.ts), its handler bound to the services. */
  routes: Route[];
  /**
   * Within SHUTDOWN_TIMEOUT_MS: stops accepting requests and device messages, lets the requests
   * in flight finish while ingest commits and acknowledges what it took, then ends the broker
   * sessions and closes the database.
   */
  stop(): Promise<void>;
}

/** A DATABASE_URL that cannot be used stops the start with one line naming it (never its password). */
async function checkDatabase(pool: pg.Pool, url: string): Promise<void> {
  try {
    await pool.query('SELECT 1');
  } catch (err) {
    const u = new URL(url);
    throw new Error(`cannot use the database ${u.hostname}:${u.port || 5432}${u.pathname} (DATABASE_URL): ${(err as Error).message}`);
  }
}

/** The start was cancelled (SIGINT/SIGTERM before ready); what had started is stopped. */
export class StartAborted extends Error {
  constructor() {
    super('start cancelled');
  }
}

/**
 * Starts every part in order. `abort` cancels the start between steps (a step under way, such
 * as initdb, is let finish), and everything started so far is stopped before the rejection.
 */
export async function startService(config: Config, log: Logger, abort?: AbortSignal): Promise<Service> {
  // What started, to stop in reverse order; each step is given the shutdown's clock.
  const cleanup: Array<(clock: ShutdownClock) => Promise<unknown>> = [];
  const checkpoint = () => {
    if (abort?.aborted) throw new StartAborted();
  };
  const stopAll = async (clock = shutdownClock(config.shutdownTimeoutMs)) => {
    for (const step of cleanup.reverse()) {
      await step(clock).catch((err: Error) => log.warn('shutdown step failed', { error: err.message }));
    }
    cleanup.length = 0;
  };
  try {
    // Needed for the embedded database and for any key the configuration does not give.
    if (!config.databaseUrl || !config.jwtSecret || !config.pskEncryptionKey) await prepareDataDir(config.dataDir);
    let embeddedDb: EmbeddedDatabase | undefined;
    if (!config.databaseUrl) {
      embeddedDb = await startEmbeddedDatabase({
        dataDir: config.dataDir,
        port: config.embeddedPgPort,
        settings: config.embeddedPgSettings,
        log,
      });
      cleanup.push(() => embeddedDb!.stop());
      checkpoint();
    }
    const databaseUrl = config.databaseUrl ?? embeddedDb!.url;
    const pool = createPool(databaseUrl, config.pgPoolSize, log, {
      statementTimeoutMs: config.dbStatementTimeoutMs,
      keepaliveSeconds: config.dbKeepaliveSeconds,
    });
    // pool.end() waits for connections in use: a request cut off by the shutdown may hold one.
    cleanup.push((clock) => until(endPool(pool), clock.deadline));
    if (config.databaseUrl) await checkDatabase(pool, config.databaseUrl);
    await migrate(pool, log, { history_chunk_interval: config.historyChunkInterval });
    checkpoint();
    await ensureAdmin(pool, config, log);

    const tokenKey = config.jwtSecret ?? (await loadOrCreateKey(config.dataDir, 'jwt-secret'));
    const tokens = new Tokens(tokenKey, config.jwtIssuer, config.tokenTtlSeconds);
    const metrics = createMetrics();
    metrics.watchPool(pool, config.pgPoolSize);
    const events = new RegistryEvents(pool, databaseUrl, log);
    await events.start();
    cleanup.push(() => events.close());
    checkpoint();

    // Device messaging: history partitions/retention, then the broker link (embedded broker
    // unless MQTT_URL) with the ingest router and shard workers. Stopped after HTTP: flush,
    // commit, acknowledge, close.
    const historyMaintenance = await startHistoryMaintenance({
      pool,
      chunkInterval: config.historyChunkInterval,
      retentionDays: config.historyRetentionDays,
      log,
    });
    cleanup.push(() => Promise.resolve(historyMaintenance.stop()));
    // DATABASE_URL without PSK_ENCRYPTION_KEY is refused by config; the embedded database keeps a generated key.
    const pskKey = config.pskEncryptionKey ?? (await loadOrCreateKey(config.dataDir, 'psk-key'));
    // Device logins, decided here for the embedded broker (which asks from its thread) and for
    // external brokers (internal listener). Stopped after ingest: its last logins are recorded.
    const hasher = config.deviceCredentialKey ? new CredentialHasher(config.deviceCredentialKey) : CredentialHasher.derivedFrom(pskKey);
    const logins = new DeviceLogins(pool, hasher, config.mqttDeviceAuth, new LoginMetrics(metrics), log.child({ component: 'logins' }));
    events.on((e) => logins.invalidate(e));
    cleanup.push(() => logins.stop());
    const ingest = await startIngest({ config, databaseUrl, metrics, logins, log });
    cleanup.push((clock) => ingest.stop(clock.drainUntil));
    checkpoint();

    const cacheMaxAgeMs = config.registryCacheMaxAgeSeconds * 1000;
    const templates = new TemplateService(pool, events, { cacheSize: config.templateCacheSize, cacheMaxAgeMs });
    // MQTT_DYNAMIC_SECURITY: the external Mosquitto's device accounts follow the credentials.
    let accounts: DynamicSecurity | undefined;
    if (config.mqttDynamicSecurity && config.mqttUrl) {
      const started = await DynamicSecurity.start({
        url: config.mqttUrl,
        // A clean session of this instance alone (two instances sharing an id would take it from each other).
        clientId: `${config.mqttClientId}-accounts-${crypto.randomBytes(4).toString('hex')}`,
        timeoutMs: config.actuationTimeoutMs,
        pool,
        log: log.child({ component: 'dynamic-security' }),
      });
      cleanup.push(() => started.close());
      events.onLocal((e) => started.registryChanged(e));
      accounts = started;
      checkpoint();
    }
    const credentials = new CredentialService(pool, events, hasher, config.maxDeviceCredentials, accounts);
    const psk = new PskService(events, new KeySealer(pskKey));
    const devices = new DeviceService(pool, events, {
      cacheSize: config.deviceCacheSize,
      cacheMaxAgeMs,
      openKey: (sealed, place) => psk.open(sealed, place),
    });
    // The API description (built here) and the query checks (compiled by startHttp) use the
    // configured limits; both are made once, at start.
    const readiness = new Readiness({
      pool,
      migrations: await loadMigrations(),
      ingest: () => ingest.status(),
      stallMs: config.ingestStallSeconds * 1000,
      metrics,
    });
    const openApi = new ServedOpenApi(apiRoutes, config);
    const routes: Route[] = bindRoutes(apiRoutes, {
      pool,
      metrics,
      readiness,
      tokens,
      templates,
      devices,
      psk,
      credentials,
      logins,
      actuation: new ActuationService(pool, ingest),
      historyMaxResults: config.historyMaxResults,
      openApi,
    });
    const http: HttpServer = await startHttp({
      publicHost: config.host,
      publicPort: config.port,
      internalHost: config.internalHost,
      internalPort: config.internalPort,
      maxBodyBytes: config.maxBodyBytes,
      routes,
      queryLimits: config,
      tokens,
      metrics,
      log,
    });
    openApi.listening({
      public: { host: config.host, port: http.publicPort },
      internal: { host: config.internalHost, port: http.internalPort },
    });
    cleanup.push(async (clock) => {
      const cutOff = await http.close(clock.drainUntil);
      // A request answered 503 must change nothing afterwards: its transaction is rolled back now.
      if (cutOff > 0) void endPool(pool, { abortInUse: true });
    });
    checkpoint();

    return {
      config,
      pool,
      metrics,
      databaseUrl,
      events,
      publicPort: http.publicPort,
      internalPort: http.internalPort,
      mqttPort: ingest.mqttPort,
      mqttTlsPort: ingest.mqttTlsPort,
      routes,
      async stop() {
        const clock = shutdownClock(config.shutdownTimeoutMs);
        readiness.draining = true;
        // The ingest flush starts now, beside the HTTP drain (its step below then waits for it).
        void ingest.stop(clock.drainUntil);
        await stopAll(clock);
      },
    };
  } catch (err) {
    await stopAll();
    throw err;
  }
}
