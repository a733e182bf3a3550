// Wires the service: database (embedded unless DATABASE_URL) -> migrations -> first admin ->
// broker (embedded unless MQTT_URL) -> HTTP listeners. `stop()` undoes it in reverse order.
import type pg from 'pg';
import type { Config } from './config.js';
import type { Logger } from './log.js';
import { startEmbeddedDatabase, type EmbeddedDatabase } from './db/embedded.js';
import { createPool } from './db/pool.js';
import { migrate } from './db/migrate.js';
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
import { CredentialHasher } from './registry/credentials/hashing.js';
import { DeviceLogins } from './registry/credentials/logins.js';
import { LoginMetrics } from './registry/credentials/metrics.js';
import { CredentialService } from './registry/credentials/service.js';
import { DynamicSecurity } from './broker/dynamic-security.js';
import { openApiText } from './openapi/document.js';

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
  const cleanup: Array<() => Promise<void>> = [];
  const checkpoint = () => {
    if (abort?.aborted) throw new StartAborted();
  };
  const stopAll = async () => {
    for (const step of cleanup.reverse()) {
      await step().catch((err: Error) => log.warn('shutdown step failed', { error: err.message }));
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
    const pool = createPool(databaseUrl, config.pgPoolSize, log);
    cleanup.push(() => pool.end());
    if (config.databaseUrl) await checkDatabase(pool, config.databaseUrl);
    await migrate(pool, log, { history_chunk_interval: config.historyChunkInterval });
    checkpoint();
    await ensureAdmin(pool, config, log);

    const tokenKey = config.jwtSecret ?? (await loadOrCreateKey(config.dataDir, 'jwt-secret'));
    const tokens = new Tokens(tokenKey, config.jwtIssuer, config.tokenTtlSeconds);
    const metrics = createMetrics();
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
    cleanup.push(async () => historyMaintenance.stop());
    // DATABASE_URL without PSK_ENCRYPTION_KEY is refused by config; the embedded database keeps a generated key.
    const pskKey = config.pskEncryptionKey ?? (await loadOrCreateKey(config.dataDir, 'psk-key'));
    // Device logins, decided here for the embedded broker (which asks from its thread) and for
    // external brokers (internal listener). Stopped after ingest: its last logins are recorded.
    const hasher = config.deviceCredentialKey ? new CredentialHasher(config.deviceCredentialKey) : CredentialHasher.derivedFrom(pskKey);
    const logins = new DeviceLogins(pool, hasher, config.mqttDeviceAuth, new LoginMetrics(metrics), log.child({ component: 'logins' }));
    events.on((e) => logins.invalidate(e));
    cleanup.push(() => logins.stop());
    const ingest = await startIngest({ config, databaseUrl, metrics, logins, log });
    cleanup.push(() => ingest.stop());
    checkpoint();

    const templates = new TemplateService(pool, events, config.templateCacheSize);
    // MQTT_DYNAMIC_SECURITY: the external Mosquitto's device accounts follow the credentials.
    let accounts: DynamicSecurity | undefined;
    if (config.mqttDynamicSecurity && config.mqttUrl) {
      const started = await DynamicSecurity.start({
        url: config.mqttUrl,
        clientId: `${config.mqttClientId}-accounts`,
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
    const psk = new PskService(pool, events, new KeySealer(pskKey));
    const devices = new DeviceService(pool, events, {
      cacheSize: config.deviceCacheSize,
      openKey: (sealed, place) => psk.open(sealed, place),
    });
    // The API description (built here) and the query checks (compiled by startHttp) use the
    // configured limits; both are made once, at start.
    const routes: Route[] = bindRoutes(apiRoutes, {
      pool,
      metrics,
      tokens,
      templates,
      devices,
      psk,
      credentials,
      logins,
      actuation: new ActuationService(pool, ingest),
      historyMaxResults: config.historyMaxResults,
      openApiText: openApiText(apiRoutes, config),
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
    cleanup.push(() => http.close(Math.floor(config.shutdownTimeoutMs / 2)));
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
      stop: stopAll,
    };
  } catch (err) {
    await stopAll();
    throw err;
  }
}
