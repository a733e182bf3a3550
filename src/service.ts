// Wires the service: database (embedded unless DATABASE_URL) -> migrations -> first admin ->
// broker (embedded unless MQTT_URL) -> HTTP listeners. `stop()` undoes it in reverse order.
import crypto from 'node:crypto';
import type pg from 'pg';
import type { Config } from './config.js';
import type { Logger } from './log.js';
import { startEmbeddedDatabase } from './db/embedded.js';
import { createPool, endPool } from './db/pool.js';
import { loadMigrations, migrate } from './db/migrate.js';
import { Readiness } from './health.js';
import { ensureAdmin } from './auth/bootstrap.js';
import { Tokens } from './auth/tokens.js';
import { loadOrCreateKey, prepareDataDir } from './secrets.js';
import { createMetrics, type Metrics } from './metrics.js';
import { startIngest, type Ingest } from './ingest/index.js';
import { startHistoryMaintenance, type HistoryMaintenance } from './history/maintenance.js';
import { MAX_HELD_READS, ReadGate, SATURATED } from './history/read-gate.js';
import { HostCpu } from './host-cpu.js';
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
import { watchViewCaches } from './registry/cache-metrics.js';
import { CredentialService } from './registry/credentials/service.js';
import { DynamicSecurity } from './broker/dynamic-security.js';
import { DeviceStatusBook } from './registry/devices/status.js';
import { LiveFeed } from './live/feed.js';
import { LiveHub } from './live/stream.js';

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
  /** History housekeeping (src/history/maintenance.ts); its timers run it, tests may too. */
  historyMaintenance: HistoryMaintenance;
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

/** What has started so far, to be stopped in reverse order; each stop step gets the shutdown's clock. */
class Started {
  private readonly stops: Array<{ name: string; stop: (clock: ShutdownClock) => Promise<unknown> }> = [];

  constructor(
    private readonly config: Config,
    private readonly log: Logger,
    private readonly abort: AbortSignal | undefined,
  ) {}

  /** Registers how to stop what just started. */
  onStop(name: string, stop: (clock: ShutdownClock) => Promise<unknown>): void {
    this.stops.push({ name, stop });
  }

  /** Between steps: a cancelled start goes no further. */
  checkpoint(): void {
    if (this.abort?.aborted) throw new StartAborted();
  }

  /**
   * Every step in turn, each cut at the clock's deadline: a step that waits for a database or
   * broker that hangs (the last device status, the session hand-over) does not hold up the
   * exit. What it could not write is not lost: a message not committed was not acknowledged.
   */
  async stopAll(clock = shutdownClock(this.config.shutdownTimeoutMs)): Promise<void> {
    for (const { name, stop } of this.stops.reverse()) {
      let finished = false;
      const step = stop(clock).then(
        () => (finished = true),
        (err: Error) => {
          finished = true;
          this.log.warn('shutdown step failed', { step: name, error: err.message });
        },
      );
      await until(step, clock.deadline);
      if (!finished) this.log.warn('shutdown step cut at SHUTDOWN_TIMEOUT_MS', { step: name });
    }
    this.stops.length = 0;
  }
}

interface Database {
  url: string;
  pool: pg.Pool;
}

/** What every start step is given: the configuration, the log, and the register of what started. */
interface StartContext {
  config: Config;
  log: Logger;
  started: Started;
}

/** The embedded PostgreSQL unless DATABASE_URL, the pool, the migrations and the first admin. */
async function openDatabase({ config, log, started }: StartContext): Promise<Database> {
  // Needed for the embedded database and for any key the configuration does not give.
  if (!config.databaseUrl || !config.jwtSecret || !config.pskEncryptionKey) await prepareDataDir(config.dataDir);
  let url = config.databaseUrl;
  if (!url) {
    const embedded = await startEmbeddedDatabase({
      dataDir: config.dataDir,
      port: config.embeddedPgPort,
      settings: config.embeddedPgSettings,
      log,
      // Ctrl-C in a terminal signals the whole process group: the database waits for the shutdown.
      ownProcessGroup: true,
    });
    started.onStop('embedded database', () => embedded.stop());
    started.checkpoint();
    url = embedded.url;
  }
  const pool = createPool(url, config.pgPoolSize, log, {
    limits: { statementTimeoutMs: config.dbStatementTimeoutMs, keepaliveSeconds: config.dbKeepaliveSeconds },
  });
  // pool.end() waits for connections in use: a request cut off by the shutdown may hold one.
  started.onStop('database pool', (clock) => until(endPool(pool), clock.deadline));
  if (config.databaseUrl) await checkDatabase(pool, config.databaseUrl);
  await migrate(pool, log, { history_chunk_interval: config.historyChunkInterval });
  started.checkpoint();
  await ensureAdmin(pool, config, log);
  return { url, pool };
}

interface Messaging {
  historyMaintenance: HistoryMaintenance;
  ingest: Ingest;
  deviceStatus: DeviceStatusBook;
  feed: LiveFeed;
  logins: DeviceLogins;
  hasher: CredentialHasher;
  pskKey: Buffer;
}

/**
 * History partitions/retention, device logins, then the broker link (embedded broker unless
 * MQTT_URL) with the ingest router and shard workers. Stopped after HTTP: flush, commit,
 * acknowledge, close; the logins after ingest, so its last logins are recorded.
 */
async function startMessaging(ctx: StartContext, db: Database, core: Core): Promise<Messaging> {
  const { config, log, started } = ctx;
  const historyMaintenance = await startHistoryMaintenance({
    pool: db.pool,
    chunkInterval: config.historyChunkInterval,
    retentionDays: config.historyRetentionDays,
    log,
  });
  started.onStop('history maintenance', () => Promise.resolve(historyMaintenance.stop()));
  // DATABASE_URL without PSK_ENCRYPTION_KEY is refused by config; the embedded database keeps a generated key.
  const pskKey = config.pskEncryptionKey ?? (await loadOrCreateKey(config.dataDir, 'psk-key'));
  // Device logins, decided here for the embedded broker (which asks from its thread) and for
  // external brokers (internal listener).
  const hasher = config.deviceCredentialKey ? new CredentialHasher(config.deviceCredentialKey) : CredentialHasher.derivedFrom(pskKey);
  const logins = new DeviceLogins({
    pool: db.pool,
    hasher,
    mode: config.mqttDeviceAuth,
    metrics: new LoginMetrics(core.metrics),
    log: log.child({ component: 'logins' }),
    maxAgeMs: config.registryCacheMaxAgeSeconds * 1000,
  });
  core.events.on((e) => logins.invalidate(e));
  started.onStop('device logins', () => logins.stop());
  const { deviceStatus, feed } = await startCommittedFeed(ctx, db, core);
  const ingest = await startIngest({ config, databaseUrl: db.url, metrics: core.metrics, logins, log });
  started.onStop('ingest', (clock) => ingest.stop(clock.drainUntil));
  started.checkpoint();
  return { historyMaintenance, ingest, logins, hasher, pskKey, deviceStatus, feed };
}

/**
 * Device status and committed telemetry (docs/live.md): listening before ingest starts, and
 * stopped after it, so the last commits are recorded.
 */
async function startCommittedFeed({ config, log, started }: StartContext, db: Database, core: Core) {
  const deviceStatus = new DeviceStatusBook(db.pool, core.events, {
    offlineAfterSeconds: config.deviceOfflineAfterSeconds,
    flushMs: config.deviceStatusFlushMs,
    log: log.child({ component: 'device-status' }),
  });
  await deviceStatus.start();
  started.onStop('device status', () => deviceStatus.stop());
  const feed = new LiveFeed({
    databaseUrl: db.url,
    limits: { statementTimeoutMs: config.dbStatementTimeoutMs, keepaliveSeconds: config.dbKeepaliveSeconds },
    fanout: config.liveFanout,
    metrics: core.metrics,
    log: log.child({ component: 'live' }),
  });
  feed.on((b) => {
    for (let i = 0; i < b.ids.length; i++) deviceStatus.seen(b.tenants[i]!, b.ids[i]!, b.received[i]!);
  });
  feed.onRelisten(() => deviceStatus.resync());
  // Another instance that starts listening reads the table back once this one has written.
  feed.onPeerJoin(() => deviceStatus.flush());
  feed.onPeerWritten(() => deviceStatus.readAgain());
  await feed.start();
  started.onStop('committed feed', () => feed.close());
  started.checkpoint();
  return { deviceStatus, feed };
}

interface Core {
  tokens: Tokens;
  metrics: Metrics;
  events: RegistryEvents;
}

/** Token signing, the metrics registry and the registry's change feed (LISTEN). */
async function startCore({ config, log, started }: StartContext, db: Database): Promise<Core> {
  const tokenKey = config.jwtSecret ?? (await loadOrCreateKey(config.dataDir, 'jwt-secret'));
  const tokens = new Tokens(tokenKey, config.jwtIssuer, config.tokenTtlSeconds);
  const metrics = createMetrics();
  metrics.watchPool(db.pool, config.pgPoolSize);
  const events = new RegistryEvents(db.pool, db.url, log);
  await events.start();
  started.onStop('registry events', () => events.close());
  started.checkpoint();
  return { tokens, metrics, events };
}

/** MQTT_DYNAMIC_SECURITY: the external Mosquitto's device accounts follow the credentials. */
async function startBrokerAccounts({ config, log, started }: StartContext, db: Database, core: Core): Promise<DynamicSecurity | undefined> {
  if (!config.mqttDynamicSecurity || !config.mqttUrl) return undefined;
  const accounts = await DynamicSecurity.start({
    url: config.mqttUrl,
    // A clean session of this instance alone (two instances sharing an id would take it from each other).
    clientId: `${config.mqttClientId}-accounts-${crypto.randomBytes(4).toString('hex')}`,
    timeoutMs: config.actuationTimeoutMs,
    pool: db.pool,
    log: log.child({ component: 'dynamic-security' }),
  });
  started.onStop('broker accounts', () => accounts.close());
  core.events.onLocal((e) => accounts.registryChanged(e));
  started.checkpoint();
  return accounts;
}

/** The registry's services (templates, devices, keys, credentials), their caches bounded in size and age. */
function registryServices(
  { config, started }: StartContext,
  { db, core, messaging, accounts }: { db: Database; core: Core; messaging: Messaging; accounts: DynamicSecurity | undefined },
) {
  const cacheMaxAgeMs = config.registryCacheMaxAgeSeconds * 1000;
  const psk = new PskService(core.events, new KeySealer(messaging.pskKey));
  const templates = new TemplateService(db.pool, core.events, { cacheSize: config.templateCacheSize, cacheMaxAgeMs });
  const devices = new DeviceService(db.pool, core.events, {
    cacheSize: config.deviceCacheSize,
    cacheMaxAgeMs,
    openKey: (sealed, place) => psk.open(sealed, place),
    status: messaging.deviceStatus,
  });
  started.onStop('registry caches', () => {
    templates.close();
    devices.close();
    return Promise.resolve();
  });
  watchViewCaches(core.metrics, { device: () => devices.viewCacheCounts(), template: () => templates.viewCacheCounts() });
  const credentials = new CredentialService(db.pool, core.events, messaging.hasher, config.maxDeviceCredentials, accounts);
  return { templates, credentials, psk, devices };
}

interface Api {
  http: HttpServer;
  routes: Route[];
  readiness: Readiness;
}

/**
 * The routes bound to the services, and the two listeners. The API description (built here) and
 * the query checks (compiled by startHttp) use the configured limits; both are made once, at start.
 */
async function startApi(
  { config, log, started }: StartContext,
  { db, core, messaging, registry }: { db: Database; core: Core; messaging: Messaging; registry: ReturnType<typeof registryServices> },
): Promise<Api> {
  const readiness = new Readiness({
    pool: db.pool,
    migrations: await loadMigrations(),
    ingest: () => messaging.ingest.status(),
    stallMs: config.ingestStallSeconds * 1000,
    metrics: core.metrics,
  });
  const openApi = new ServedOpenApi(apiRoutes, config);
  // Ingest first: aggregate reads wait while ingest has messages in hand and the host's CPUs are saturated.
  const hostCpu = new HostCpu();
  const historyReads = new ReadGate({
    sharePercent: config.historyReadSharePercent,
    closed: () => hostCpu.busy >= SATURATED && messaging.ingest.status().pending > 0,
    maxWaiting: MAX_HELD_READS,
    registry: core.metrics.registry,
  });
  started.onStop('history read gate', () => {
    historyReads.stop();
    hostCpu.stop();
    return Promise.resolve();
  });
  const routes: Route[] = bindRoutes(apiRoutes, {
    ...registry,
    pool: db.pool,
    metrics: core.metrics,
    readiness,
    tokens: core.tokens,
    logins: messaging.logins,
    actuation: new ActuationService(db.pool, messaging.ingest),
    historyMaxResults: config.historyMaxResults,
    historyMaxBuckets: config.historyMaxBuckets,
    historyReads,
    openApi,
  });
  // The live stream (GET /stream): committed telemetry, registry changes, status changes.
  const live = new LiveHub({
    pool: db.pool,
    tokens: core.tokens,
    metrics: core.metrics,
    log: log.child({ component: 'live' }),
    bufferBytes: config.liveClientBufferBytes,
    maxClientsPerTenant: config.liveMaxClientsPerTenant,
  });
  messaging.feed.on((b) => live.committed(b));
  messaging.deviceStatus.onChange((s) => live.statusChanged(s));
  core.events.on((e) => live.registryChanged(e));
  const http = await startHttp({
    publicHost: config.host,
    publicPort: config.port,
    internalHost: config.internalHost,
    internalPort: config.internalPort,
    maxBodyBytes: config.maxBodyBytes,
    routes,
    queryLimits: config,
    tokens: core.tokens,
    metrics: core.metrics,
    log,
    publicApp: (app) => live.attach(app),
  });
  openApi.listening({
    public: { host: config.host, port: http.publicPort },
    internal: { host: config.internalHost, port: http.internalPort },
  });
  started.onStop('HTTP', async (clock) => {
    const cutOff = await http.close(clock.drainUntil);
    // A request answered 503 must change nothing afterwards: its transaction is rolled back now.
    if (cutOff > 0) void endPool(db.pool, { abortInUse: true });
  });
  // Run before the HTTP drain (stops run in reverse): streams end with a close reason.
  started.onStop('live streams', () => Promise.resolve(live.close()));
  started.checkpoint();
  return { http, routes, readiness };
}

/**
 * Starts every part in order. `abort` cancels the start between steps (a step under way, such
 * as initdb, is let finish), and everything started so far is stopped before the rejection.
 */
export async function startService(config: Config, log: Logger, abort?: AbortSignal): Promise<Service> {
  const started = new Started(config, log, abort);
  const ctx: StartContext = { config, log, started };
  try {
    // A signal while the modules loaded: nothing is started (an embedded initdb alone could outlast the shutdown's timeout).
    started.checkpoint();
    const db = await openDatabase(ctx);
    const core = await startCore(ctx, db);
    const messaging = await startMessaging(ctx, db, core);
    const accounts = await startBrokerAccounts(ctx, db, core);
    const registry = registryServices(ctx, { db, core, messaging, accounts });
    const api = await startApi(ctx, { db, core, messaging, registry });
    return {
      config,
      pool: db.pool,
      metrics: core.metrics,
      databaseUrl: db.url,
      events: core.events,
      publicPort: api.http.publicPort,
      internalPort: api.http.internalPort,
      mqttPort: messaging.ingest.mqttPort,
      mqttTlsPort: messaging.ingest.mqttTlsPort,
      routes: api.routes,
      historyMaintenance: messaging.historyMaintenance,
      async stop() {
        const clock = shutdownClock(config.shutdownTimeoutMs);
        api.readiness.draining = true;
        // The ingest flush starts now, beside the HTTP drain (its step then waits for it).
        void messaging.ingest.stop(clock.drainUntil);
        await started.stopAll(clock);
      },
    };
  } catch (err) {
    await started.stopAll();
    throw err;
  }
}
