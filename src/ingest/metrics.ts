// Ingest metrics in the main thread's registry. The router thread and the shard workers have
// their own memory, so they count locally and the router sends deltas every 250 ms.
import client from 'prom-client';
import type { Metrics } from '../metrics.js';
import { DROP_REASON_NAMES, dropReasonsHelp } from './drop-reasons.js';
import type { IngestMetricsDelta } from './protocol.js';

export class IngestMetrics {
  private readonly received: client.Counter;
  private readonly messagesStored: client.Counter;
  private readonly valuesReceived: client.Counter;
  private readonly valuesStored: client.Counter;
  private readonly dropped: client.Counter<'reason'>;
  private readonly batchRows: client.Histogram;
  private readonly copySeconds: client.Histogram;
  private readonly cacheHits: client.Counter;
  private readonly cacheMisses: client.Counter;
  private readonly queueDepth: client.Gauge<'shard'>;
  private readonly cachedDevices: client.Gauge<'shard'>;

  constructor(metrics: Metrics) {
    const registers = [metrics.registry];
    this.received = new client.Counter({
      name: 'ingest_messages_received_total',
      help: 'Device messages received from the broker',
      registers,
    });
    this.messagesStored = new client.Counter({
      name: 'ingest_messages_stored_total',
      help: 'Device messages with at least one value committed to history',
      registers,
    });
    this.valuesReceived = new client.Counter({
      name: 'ingest_values_received_total',
      help: 'Keys of valid device messages (after translation, without timestamp)',
      registers,
    });
    this.valuesStored = new client.Counter({ name: 'ingest_values_stored_total', help: 'Values committed to history', registers });
    this.dropped = new client.Counter({
      name: 'ingest_dropped_total',
      help: dropReasonsHelp(),
      labelNames: ['reason'] as const,
      registers,
    });
    for (const r of DROP_REASON_NAMES) this.dropped.labels(r).inc(0);
    this.batchRows = new client.Histogram({
      name: 'ingest_batch_rows',
      help: 'Rows per COPY batch',
      buckets: [1, 10, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 50000],
      registers,
    });
    this.copySeconds = new client.Histogram({
      name: 'ingest_copy_duration_seconds',
      help: 'Duration of a COPY batch, from connection checkout to commit',
      buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
      registers,
    });
    this.cacheHits = new client.Counter({
      name: 'ingest_cache_hits_total',
      help: 'Messages whose device was in the shard cache',
      registers,
    });
    this.cacheMisses = new client.Counter({ name: 'ingest_cache_misses_total', help: 'Messages whose device had to be loaded', registers });
    this.queueDepth = new client.Gauge({
      name: 'ingest_queue_depth',
      help: 'Unacknowledged messages per shard',
      labelNames: ['shard'] as const,
      registers,
    });
    this.cachedDevices = new client.Gauge({
      name: 'ingest_cached_devices',
      help: 'Devices in each shard worker cache',
      labelNames: ['shard'] as const,
      registers,
    });
  }

  apply(d: IngestMetricsDelta): void {
    if (d.messagesReceived) this.received.inc(d.messagesReceived);
    if (d.messagesStored) this.messagesStored.inc(d.messagesStored);
    if (d.valuesReceived) this.valuesReceived.inc(d.valuesReceived);
    if (d.valuesStored) this.valuesStored.inc(d.valuesStored);
    for (const [reason, n] of Object.entries(d.dropped)) if (n) this.dropped.labels(reason).inc(n);
    for (const r of d.batchRows) this.batchRows.observe(r);
    for (const s of d.copySeconds) this.copySeconds.observe(s);
    if (d.cacheHits) this.cacheHits.inc(d.cacheHits);
    if (d.cacheMisses) this.cacheMisses.inc(d.cacheMisses);
    d.queueDepth.forEach((n, shard) => this.queueDepth.labels(String(shard)).set(n));
    d.cachedDevicesByShard.forEach((n, shard) => this.cachedDevices.labels(String(shard)).set(n));
  }
}
