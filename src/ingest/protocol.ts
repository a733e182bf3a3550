// Shapes that cross thread boundaries: router -> shard worker tasks and their results, and the
// messages between the main thread and the ingest router thread.
import type { Config } from '../config.js';
import type { LinkState } from '../broker/link.js';
import type { AcceptedLogin, DeviceLogin, LoginStanding, LoginVerdict } from '../registry/credentials/logins.js';
import type { DeviceRef } from '../topics.js';
import type { DropReason } from './drop-reasons.js';
import { emptyLatency, type LatencyCounts } from './latency.js';

/** A batch of messages for one shard, in arrival order. */
export interface ShardTask {
  /** Device keys (`<tenant>/<id>`) joined by NUL (one string clones far cheaper than an array). */
  keys: string;
  /** The payloads, concatenated; message i is payload[offsets[i], offsets[i+1]). */
  payload: Uint8Array;
  offsets: Uint32Array;
  /** Receive times, µs since the epoch (strictly increasing within a router). */
  received: Float64Array;
}

/** Counted in a shard worker since its previous report. */
export interface WorkerMetricsDelta {
  messagesStored: number;
  valuesReceived: number;
  valuesStored: number;
  dropped: Partial<Record<DropReason, number>>;
  cacheHits: number;
  cacheMisses: number;
  batchRows: number[];
  copySeconds: number[];
  /** From each stored message's arrival to the commit of its rows. */
  commitLatency: LatencyCounts;
  /** Absolute: devices in this worker's cache. */
  cachedDevices: number;
}

/** Nothing counted yet: a shard worker's start, and the router's (which adds its own counts). */
export function emptyWorkerMetrics(): WorkerMetricsDelta {
  return {
    messagesStored: 0,
    valuesReceived: 0,
    valuesStored: 0,
    dropped: {},
    cacheHits: 0,
    cacheMisses: 0,
    batchRows: [],
    copySeconds: [],
    commitLatency: emptyLatency(),
    cachedDevices: 0,
  };
}

/** Everything the router reports to the main thread's metrics registry. */
export interface IngestMetricsDelta extends WorkerMetricsDelta {
  messagesReceived: number;
  /** Messages whose ack handle was used (after the commit, or dropped for good). */
  messagesAcknowledged: number;
  /** Of those, the ones acknowledged after their batch committed (ingest makes progress; drops do not count). */
  messagesCommitted: number;
  /** From each message's arrival to its acknowledgement, for messages acknowledged after their batch. */
  ackLatency: LatencyCounts;
  /** Absolute: unacknowledged messages per shard. */
  queueDepth: number[];
  /** Absolute: cached devices per shard worker. */
  cachedDevicesByShard: number[];
}

/** The configuration the ingest router thread reads (no secrets: they stay in the main thread). */
export const INGEST_CONFIG_KEYS = [
  'logLevel',
  'logFormat',
  'mqttUrl',
  'mqttHost',
  'mqttPort',
  'mqttClientId',
  'mqttSubscriberConnections',
  'mqttShareGroup',
  'mqttSessionExpirySeconds',
  'mqttReceiveMaximum',
  'mqttKeepaliveSeconds',
  'dbStatementTimeoutMs',
  'dbKeepaliveSeconds',
  'mqttSessionLeaseSeconds',
  'ingestWorkers',
  'ingestBatchRows',
  'ingestBatchMs',
  'maxMessageBytes',
  'ingestCacheDevices',
  'registryCacheMaxAgeSeconds',
  'ingestMaxPending',
  'ingestThreadYoungGenerationMb',
  'ingestThreadNice',
  'actuationTimeoutMs',
  'mqttDeviceAuth',
  'mqttPlain',
  'mqttTlsPort',
  'mqttTlsCert',
  'mqttTlsKey',
  'mqttTlsCa',
] as const satisfies ReadonlyArray<keyof Config>;

/** The router thread's workerData: its part of the configuration, and the database URL (an embedded database's is known only once it runs). */
export type IngestSettings = Pick<Config, (typeof INGEST_CONFIG_KEYS)[number]> & {
  databaseUrl: string;
  /** This process, as the owner of broker session leases (random per process). */
  instanceId: string;
};

/** A shard worker's workerData (Piscina). */
export type ShardWorkerSettings = Pick<
  IngestSettings,
  | 'databaseUrl'
  | 'logLevel'
  | 'logFormat'
  | 'ingestBatchRows'
  | 'ingestBatchMs'
  | 'ingestCacheDevices'
  | 'registryCacheMaxAgeSeconds'
  | 'dbStatementTimeoutMs'
  | 'dbKeepaliveSeconds'
> & {
  /** The COPY turn shared by the shard workers (copy-turn.ts). */
  copyTurn: SharedArrayBuffer;
};

export type MainToRouter =
  | { type: 'publish'; requestId: number; topics: string[]; payload: string }
  /** The registry's answer to a device login the embedded broker asked about (`error`: it could not decide). */
  | { type: 'login-verdict'; requestId: number; verdict?: LoginVerdict; error?: string }
  /** What became of the logins asked about (`error`: it could not tell). */
  | { type: 'login-standing'; requestId: number; standing?: LoginStanding[]; error?: string }
  | { type: 'stop'; timeoutMs: number };

export type RouterToMain =
  | { type: 'ready'; mqttPort: number | undefined; mqttTlsPort?: number | undefined; mode: string }
  /** A device login to the embedded broker: the main thread holds the credential key and decides (src/registry/credentials/logins.ts). */
  | { type: 'login'; requestId: number; login: DeviceLogin }
  /** What became of logins accepted earlier (after registry events were missed). */
  | { type: 'standing'; requestId: number; logins: AcceptedLogin[] }
  /** What the embedded broker made of a login the registry accepted (counted then: LoginCheck.settle). */
  | { type: 'login-settled'; device: DeviceRef; certificate: boolean; outcome: LoginVerdict }
  | { type: 'failed'; error: string; configVariable?: string }
  | { type: 'published'; requestId: number; error?: string }
  | { type: 'metrics'; delta: IngestMetricsDelta; link: LinkState | undefined }
  | { type: 'stopped' };

/**
 * Committed telemetry, posted by each shard worker on this BroadcastChannel once a COPY commits
 * (never before): the main thread's live stream and device status read it (src/live/).
 */
export const COMMITTED_CHANNEL = 'device-registry:committed';

/** The stored messages of one commit, in order; message i is tenants[i]/ids[i]. */
export interface CommittedBatch {
  tenants: string[];
  ids: string[];
  /** The time of the message's values (µs), as stored in history. */
  ts: number[];
  /** When the message was received (µs): a device's last_seen. */
  received: number[];
  /** The stored values of each message as a JSON object text, or NOT_CARRIED. */
  attrs: string[];
}

/** The attrs of a message another instance passed on without its values (too large for one NOTIFY): its device was seen, nothing more. */
export const NOT_CARRIED = '';
