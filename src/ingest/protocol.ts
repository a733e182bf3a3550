// Shapes that cross thread boundaries: router -> shard worker tasks and their results, and the
// messages between the main thread and the ingest router thread.
import type { DropReason } from './drop-reasons.js';

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
  /** Absolute: devices in this worker's cache. */
  cachedDevices: number;
}

/** Everything the router reports to the main thread's metrics registry. */
export interface IngestMetricsDelta extends WorkerMetricsDelta {
  messagesReceived: number;
  /** Absolute: unacknowledged messages per shard. */
  queueDepth: number[];
  /** Absolute: cached devices per shard worker. */
  cachedDevicesByShard: number[];
}

/** What the router thread needs from the configuration. */
export interface IngestSettings {
  databaseUrl: string;
  logLevel: 'debug' | 'info' | 'warn' | 'error' | 'silent';
  /** External broker URL; undefined: run the embedded broker. */
  mqttUrl: string | undefined;
  mqttHost: string;
  mqttPort: number;
  mqttClientId: string;
  mqttSubscriberConnections: number;
  mqttShareGroup: string;
  mqttSessionExpirySeconds: number;
  mqttReceiveMaximum: number;
  workers: number;
  batchRows: number;
  batchMs: number;
  maxMessageBytes: number;
  cacheDevices: number;
  maxPending: number;
  actuationTimeoutMs: number;
}

/** Settings of a shard worker (Piscina workerData). */
export interface ShardWorkerSettings {
  databaseUrl: string;
  logLevel: IngestSettings['logLevel'];
  batchRows: number;
  batchMs: number;
  cacheDevices: number;
  /** The COPY turn shared by the shard workers (copy-turn.ts). */
  copyTurn: SharedArrayBuffer;
}

export type MainToRouter =
  | { type: 'publish'; requestId: number; topics: string[]; payload: string }
  | { type: 'stop'; timeoutMs: number };

export type RouterToMain =
  | { type: 'ready'; mqttPort: number | undefined; mode: string }
  | { type: 'failed'; error: string; configVariable?: string }
  | { type: 'published'; requestId: number; error?: string }
  | { type: 'metrics'; delta: IngestMetricsDelta }
  | { type: 'stopped' };
