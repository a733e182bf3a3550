// The shard worker (a Piscina worker thread): one ShardActor with its device cache (fed by the
// registry reader), its database connections and its COPY writer. The router pins each shard
// to one of these workers; every task is one batch of that shard's messages, and the task's
// result (sent once the batch is committed) carries this worker's metric deltas.
import { BroadcastChannel, workerData } from 'node:worker_threads';
import pg from 'pg';
import { createLogger, logProcessWarnings } from '../src/log.js';
import { connectionLimits, keepClientErrors, SESSION_OPTIONS } from '../src/db/limits.js';
import { REGISTRY_CHANNEL, type RegistryEvent } from '../src/registry/events.js';
import { DeviceCache } from '../src/ingest/device-cache.js';
import { HistoryWriter } from '../src/ingest/history-writer.js';
import { CopyTurn } from '../src/ingest/copy-turn.js';
import { DatabaseRetry } from '../src/ingest/db-retry.js';
import { RegistryReader } from '../src/ingest/registry-reader.js';
import { SchemaPool } from '../src/ingest/device-model.js';
import { ShardActor } from '../src/ingest/shard-actor.js';
import { COMMITTED_CHANNEL, type ShardTask, type ShardWorkerSettings, type WorkerMetricsDelta } from '../src/ingest/protocol.js';

const settings = workerData as ShardWorkerSettings;
const log = createLogger(settings.logLevel, { component: 'ingest-shard' }, { format: settings.logFormat });
logProcessWarnings(log);

// Two connections: one for COPY, one for registry reads, so a lookup never waits behind a COPY.
const pool = new pg.Pool({
  connectionString: settings.databaseUrl,
  options: SESSION_OPTIONS,
  max: 2,
  idleTimeoutMillis: 60_000,
  connectionTimeoutMillis: 5000,
  // A hung COPY or read fails in bounded time (and is retried) instead of stalling the shard.
  ...connectionLimits({ statementTimeoutMs: settings.dbStatementTimeoutMs, keepaliveSeconds: settings.dbKeepaliveSeconds }, true),
});
pool.on('error', (err) => log.debug('idle database connection failed', { error: err.message }));
keepClientErrors(pool, (err) => log.debug('database connection failed in use', { error: err.message }));

// One patience for both: a database outage is logged once, whichever of them meets it.
const retry = new DatabaseRetry(log);
const writer = new HistoryWriter(pool, log, retry, new CopyTurn(settings.copyTurn));
const registry = new RegistryReader(pool, retry, log, new SchemaPool());
const cache = new DeviceCache((devices) => registry.load(devices), settings.ingestCacheDevices, settings.registryCacheMaxAgeSeconds * 1000);
// Committed messages go to the main thread (live stream, device status); posting never waits.
const committed = new BroadcastChannel(COMMITTED_CHANNEL);
committed.unref();
const actor = new ShardActor(cache, writer, {
  batchRows: settings.ingestBatchRows,
  log,
  onCommitted: (batch) => committed.postMessage(batch),
});

const channel = new BroadcastChannel(REGISTRY_CHANNEL);
channel.onmessage = (event) => cache.invalidate((event as { data: RegistryEvent }).data);
channel.unref();

export default function handleBatch(task: ShardTask): Promise<WorkerMetricsDelta> {
  return actor.handle(task);
}
