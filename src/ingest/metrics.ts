// Ingest metrics in the main thread's registry. The router thread and the shard workers have
// their own memory, so they count locally and the router sends deltas every 250 ms, with the
// state of the broker link.
import client from 'prom-client';
import type { LinkState } from '../broker/link.js';
import { CountedHistogram, type Metrics } from '../metrics.js';
import { DROP_REASON_NAMES, dropReasonsHelp } from './drop-reasons.js';
import { LATENCY_BUCKETS } from './latency.js';
import type { IngestMetricsDelta } from './protocol.js';

export class IngestMetrics {
  private readonly received: client.Counter;
  private readonly acknowledged: client.Counter;
  private readonly ackLatency: CountedHistogram;
  private readonly commitLatency: CountedHistogram;
  private readonly linkUp: client.Gauge;
  private readonly linkConnections: client.Gauge<'state'>;
  private readonly linkReconnects: client.Counter;
  /** The link's own count when last reported (it starts again at 0 with a new link). */
  private lastReconnects = 0;
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
    this.acknowledged = new client.Counter({
      name: 'ingest_messages_acknowledged_total',
      help: 'Device messages acknowledged to the broker (PUBACK for QoS 1): after their commit, or when dropped for good',
      registers,
    });
    this.ackLatency = new CountedHistogram(
      'ingest_ack_latency_seconds',
      "From a message's arrival at the service to its acknowledgement (PUBACK for QoS 1), for messages acknowledged after their batch was processed",
      LATENCY_BUCKETS,
      metrics.registry,
    );
    this.commitLatency = new CountedHistogram(
      'ingest_publish_to_commit_seconds',
      "From a message's arrival at the service (the broker's PUBLISH) to the commit of its values to history",
      LATENCY_BUCKETS,
      metrics.registry,
    );
    this.linkUp = new client.Gauge({
      name: 'broker_link_up',
      help: '1 while device messages can come in and configuration messages go out over the broker link, else 0',
      registers,
    });
    this.linkConnections = new client.Gauge({
      name: 'broker_link_connections',
      help: "The broker link's own connections (external broker: subscribers and publisher; embedded: its listener), by state (connected, configured)",
      labelNames: ['state'] as const,
      registers,
    });
    this.linkReconnects = new client.Counter({
      name: 'broker_link_reconnects_total',
      help: "Times one of the broker link's subscriber connections (external broker) lost the broker and connected again",
      registers,
    });
    this.linkUp.set(0);
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
    if (d.messagesAcknowledged) this.acknowledged.inc(d.messagesAcknowledged);
    this.ackLatency.add(d.ackLatency.counts, d.ackLatency.sum);
    this.commitLatency.add(d.commitLatency.counts, d.commitLatency.sum);
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

  /** The link's state as last reported (none: the router thread is not running). */
  link(state: LinkState | undefined): void {
    this.linkUp.set(state?.up ? 1 : 0);
    this.linkConnections.labels('connected').set(state?.connected ?? 0);
    this.linkConnections.labels('configured').set(state?.connections ?? 0);
    if (state?.reconnects !== undefined) {
      const n = state.reconnects;
      if (n > this.lastReconnects) this.linkReconnects.inc(n - this.lastReconnects);
      this.lastReconnects = n;
    } else if (!state) {
      this.lastReconnects = 0;
    }
  }
}
