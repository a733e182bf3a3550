// The ingest router thread (a worker_threads Worker started by src/ingest/index.ts), so that no
// MQTT traffic touches the HTTP thread. It hosts the broker link (the embedded broker, or the
// subscriber and publisher connections to an external one), the router, and the Piscina pool
// of shard actors. It reports metrics to the main thread and serves its actuation requests.
import { BroadcastChannel, parentPort, workerData } from 'node:worker_threads';
import pg from 'pg';
import { ConfigError } from '../config.js';
import { createLogger, logProcessWarnings } from '../log.js';
import { ingestThreadLimits } from '../v8-heap.js';
import { lowerThreadPriority } from '../thread-priority.js';
import { connectionLimits, keepClientErrors, SESSION_OPTIONS } from '../db/limits.js';
import { REGISTRY_CHANNEL, type RegistryEvent } from '../registry/events.js';
import { EmbeddedLink } from '../broker/embedded.js';
import { ExternalLink } from '../broker/external.js';
import { SessionLeases } from '../broker/session-leases.js';
import { maxPacketBytes, type BrokerLink } from '../broker/link.js';
import { IngestRouter } from './router.js';
import { ShardPool } from './shard-pool.js';
import { CopyTurn } from './copy-turn.js';
import { LoginBridge } from './login-bridge.js';
import type { IngestSettings, MainToRouter, RouterToMain } from './protocol.js';

const settings = workerData as IngestSettings;
const log = createLogger(settings.logLevel, { component: 'ingest' }, { format: settings.logFormat });
logProcessWarnings(log);
// Before the shard workers start: they inherit it.
if (!lowerThreadPriority(settings.ingestThreadNice))
  log.warn('INGEST_THREAD_NICE could not be applied; the ingest threads keep their priority');
const port = parentPort!;
const post = (m: RouterToMain) => port.postMessage(m);

const shards = new ShardPool(
  settings.ingestWorkers,
  {
    databaseUrl: settings.databaseUrl,
    logLevel: settings.logLevel,
    logFormat: settings.logFormat,
    ingestBatchRows: settings.ingestBatchRows,
    ingestBatchMs: settings.ingestBatchMs,
    ingestCacheDevices: settings.ingestCacheDevices,
    registryCacheMaxAgeSeconds: settings.registryCacheMaxAgeSeconds,
    dbStatementTimeoutMs: settings.dbStatementTimeoutMs,
    dbKeepaliveSeconds: settings.dbKeepaliveSeconds,
    copyTurn: CopyTurn.shared(),
  },
  log,
  ingestThreadLimits(settings.ingestThreadYoungGenerationMb),
);
let link: BrokerLink | undefined;
const router = new IngestRouter(shards, {
  maxMessageBytes: settings.maxMessageBytes,
  maxPending: settings.ingestMaxPending,
  holdMs: settings.ingestBatchMs,
  log,
  onPressure: (paused) => {
    if (paused) {
      log.warn('too many unacknowledged messages; pausing the broker connections', { pending: router.unacknowledged });
      link?.pause();
    } else {
      log.info('ingest caught up; resuming the broker connections');
      link?.resume();
    }
  },
});
// The external link's session leases (the shard workers have their own connections); the
// embedded broker's logins are decided by the main thread.
const brokerPool = settings.mqttUrl
  ? new pg.Pool({
      connectionString: settings.databaseUrl,
      options: SESSION_OPTIONS,
      max: 2,
      connectionTimeoutMillis: 5000,
      ...connectionLimits({ statementTimeoutMs: settings.dbStatementTimeoutMs, keepaliveSeconds: settings.dbKeepaliveSeconds }, true),
    })
  : undefined;
brokerPool?.on('error', () => undefined);
if (brokerPool) keepClientErrors(brokerPool, () => undefined);
const logins = new LoginBridge(post);

const channel = new BroadcastChannel(REGISTRY_CHANNEL);
channel.onmessage = (event) => link?.registryChanged((event as { data: RegistryEvent }).data);
channel.unref();

const metricsTimer = setInterval(() => post({ type: 'metrics', delta: router.takeMetrics(), link: link?.state() }), 250);
metricsTimer.unref();

/** The broker link, with the router as its inbox: an external broker (MQTT_URL) or the embedded one. */
function startLink(): Promise<BrokerLink> {
  if (settings.mqttUrl) {
    return ExternalLink.start(
      {
        url: settings.mqttUrl,
        clientId: settings.mqttClientId,
        connections: settings.mqttSubscriberConnections,
        shareGroup: settings.mqttShareGroup,
        sessionExpirySeconds: settings.mqttSessionExpirySeconds,
        receiveMaximum: settings.mqttReceiveMaximum,
        keepaliveSeconds: settings.mqttKeepaliveSeconds,
        maxPacketBytes: maxPacketBytes(settings.maxMessageBytes),
        publishTimeoutMs: settings.actuationTimeoutMs,
        log,
        leases: new SessionLeases(brokerPool!, {
          base: settings.mqttClientId,
          shareGroup: settings.mqttShareGroup,
          connections: settings.mqttSubscriberConnections,
          leaseSeconds: settings.mqttSessionLeaseSeconds,
          owner: settings.instanceId,
        }),
        leaseSeconds: settings.mqttSessionLeaseSeconds,
        // The sessions are someone else's now: whatever this thread holds unacknowledged is
        // delivered to them again. Start afresh, on a slot of its own (the main thread restarts it).
        onSessionsLost: () => process.exit(1),
      },
      router,
    );
  }
  return EmbeddedLink.start({
    host: settings.mqttHost,
    port: settings.mqttPort,
    plain: settings.mqttPlain,
    tls:
      settings.mqttTlsCert && settings.mqttTlsKey
        ? { port: settings.mqttTlsPort, cert: settings.mqttTlsCert, key: settings.mqttTlsKey, ca: settings.mqttTlsCa }
        : undefined,
    logins,
    deviceAuth: settings.mqttDeviceAuth,
    log,
    inbox: router,
    maxMessageBytes: settings.maxMessageBytes,
  });
}

async function start(): Promise<void> {
  try {
    link = await startLink();
  } catch (err) {
    await shards.close().catch(() => undefined);
    await brokerPool?.end().catch(() => undefined);
    post(
      err instanceof ConfigError
        ? { type: 'failed', error: err.message.slice(err.variable.length + 1), configVariable: err.variable }
        : { type: 'failed', error: (err as Error).message },
    );
    return;
  }
  post({ type: 'ready', mqttPort: link.mqttPort, mqttTlsPort: link.mqttTlsPort, mode: settings.mqttUrl ? 'external' : 'embedded' });
}

async function stop(timeoutMs: number): Promise<void> {
  clearInterval(metricsTimer);
  // Stop taking new work, commit and acknowledge what was taken, then hang up. Whatever is
  // not acknowledged in time stays with the broker and is delivered again. An external link
  // whose traffic another instance takes over leaves the share group first and reads on until
  // the broker has handed over what it had queued for this instance.
  const deadline = Date.now() + timeoutMs;
  link?.stopAccepting();
  const leaving = (await link?.leave?.()) ?? false;
  if (!leaving) link?.pause();
  let timer: NodeJS.Timeout | undefined;
  const drained = await Promise.race([
    Promise.all([router.drain(), leaving ? link?.settled?.() : undefined]).then(() => true),
    new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(false), Math.max(0, deadline - Date.now())))),
  ]);
  clearTimeout(timer);
  if (!drained)
    log.warn('shutdown: some messages were not committed in time; the broker delivers them again', { pending: router.unacknowledged });
  router.stop();
  post({ type: 'metrics', delta: router.takeMetrics(), link: link?.state() });
  await link?.close().catch((err: Error) => log.warn('closing the broker link failed', { error: err.message }));
  await shards.close().catch(() => undefined);
  await brokerPool?.end().catch(() => undefined);
  channel.close();
  post({ type: 'stopped' });
}

port.on('message', (m: MainToRouter) => {
  switch (m.type) {
    case 'publish':
      if (!link) {
        post({ type: 'published', requestId: m.requestId, error: 'the broker link is not running' });
        return;
      }
      link.publish(m.topics, m.payload).then(
        () => post({ type: 'published', requestId: m.requestId }),
        (err: Error) => post({ type: 'published', requestId: m.requestId, error: err.message }),
      );
      break;
    case 'login-verdict':
      logins.answer(m.requestId, m.verdict, m.error);
      break;
    case 'login-standing':
      logins.answer(m.requestId, m.standing, m.error);
      break;
    case 'stop':
      void stop(m.timeoutMs);
      break;
  }
});

void start();
