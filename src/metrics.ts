// Prometheus metrics (prom-client), one registry per service instance so that tests can run
// several instances in one process. Names follow Prometheus conventions (base units in the
// name: _seconds, _bytes; counters end in _total); docs/operations.md lists each with its
// meaning. Ingest metrics are added by the ingest module, the readiness checks' by src/health.ts.
import os from 'node:os';
import v8 from 'node:v8';
import client from 'prom-client';

/** What the pool gauges read of a database pool (pg.Pool has these). */
export interface PoolCounts {
  readonly totalCount: number;
  readonly idleCount: number;
  readonly waitingCount: number;
}

export interface Metrics {
  registry: client.Registry;
  observeHttp(method: string, route: string, status: number, seconds: number): void;
  /** Gauges of the pool's connections, read at each scrape. */
  watchPool(pool: PoolCounts, max: number): void;
}

export function createMetrics(): Metrics {
  const registry = new client.Registry();
  // process_* and nodejs_* (CPU, memory, file descriptors, heap, GC, event-loop lag).
  client.collectDefaultMetrics({ register: registry });
  // prom-client names three gauges `_total`, which Prometheus keeps for counters (promtool check
  // metrics refuses them): each is the sum of its by-type gauge (`nodejs_active_handles`, ...).
  for (const name of ['nodejs_active_handles_total', 'nodejs_active_requests_total', 'nodejs_active_resources_total'])
    registry.removeSingleMetric(name);
  memoryLimits(registry);
  const requests = new client.Counter({
    name: 'http_requests_total',
    help: 'HTTP requests answered, by method, route pattern and status',
    labelNames: ['method', 'route', 'status'] as const,
    registers: [registry],
  });
  const duration = new client.Histogram({
    name: 'http_request_duration_seconds',
    help: 'HTTP request duration from arrival to response, by method and route pattern',
    labelNames: ['method', 'route'] as const,
    buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
    registers: [registry],
  });
  // Label children are looked up once per combination; the hot path only increments.
  const counters = new Map<string, ReturnType<typeof requests.labels>>();
  const histograms = new Map<string, ReturnType<typeof duration.labels>>();
  return {
    registry,
    observeHttp(method, route, status, seconds) {
      const hk = method + ' ' + route;
      const ck = hk + ' ' + status;
      let c = counters.get(ck);
      if (!c) counters.set(ck, (c = requests.labels(method, route, String(status))));
      c.inc();
      let h = histograms.get(hk);
      if (!h) histograms.set(hk, (h = duration.labels(method, route)));
      h.observe(seconds);
    },
    watchPool(pool, max) {
      new client.Gauge({
        name: 'db_pool_connections',
        help: 'Connections of the HTTP side database pool, by state (in_use, idle)',
        labelNames: ['state'] as const,
        registers: [registry],
        collect() {
          this.labels('in_use').set(pool.totalCount - pool.idleCount);
          this.labels('idle').set(pool.idleCount);
        },
      });
      new client.Gauge({
        name: 'db_pool_connections_max',
        help: 'Connections the HTTP side database pool may open (PG_POOL_SIZE)',
        registers: [registry],
      }).set(max);
      new client.Gauge({
        name: 'db_pool_waiting_requests',
        help: 'Queries waiting for a connection of the HTTP side database pool',
        registers: [registry],
        collect() {
          this.set(pool.waitingCount);
        },
      });
    },
  };
}

/** The limits the memory alerts compare with. */
function memoryLimits(registry: client.Registry): void {
  const limit = process.constrainedMemory?.() ?? 0;
  new client.Gauge({
    name: 'process_memory_limit_bytes',
    help: "Memory this process may use: its cgroup (container) limit, else the machine's memory",
    registers: [registry],
  }).set(limit > 0 ? Math.min(limit, os.totalmem()) : os.totalmem());
  new client.Gauge({
    name: 'nodejs_heap_size_limit_bytes',
    help: 'Largest JavaScript heap of the main thread (V8 heap_size_limit)',
    registers: [registry],
  }).set(v8.getHeapStatistics().heap_size_limit);
}

/**
 * A histogram fed with bucket counts made elsewhere (worker threads count per bucket and send
 * the counts). Exposed like any prom-client histogram: `_bucket{le}`, `_sum`, `_count`.
 */
export class CountedHistogram {
  readonly type = 'histogram';
  readonly aggregator = 'sum';
  readonly labelNames: string[] = [];
  private readonly counts: number[];
  private sum = 0;

  constructor(
    readonly name: string,
    readonly help: string,
    private readonly bounds: readonly number[],
    registry: client.Registry,
  ) {
    this.counts = new Array<number>(bounds.length + 1).fill(0);
    // prom-client's Metric type is its own classes'; the registry only calls get(), reset() and reads name/help/type.
    registry.registerMetric(this as unknown as client.Metric);
  }

  /** Adds counts per bucket (the last one: above every bound) and their sum of seconds. */
  add(counts: readonly number[], sum: number): void {
    for (let i = 0; i < this.counts.length; i++) this.counts[i]! += counts[i] ?? 0;
    this.sum += sum;
  }

  get(): client.MetricObjectWithValues<client.MetricValueWithName<string>> {
    let cumulative = 0;
    const values: Array<client.MetricValueWithName<string>> = this.bounds.map((le, i) => {
      cumulative += this.counts[i]!;
      return { labels: { le }, value: cumulative, metricName: `${this.name}_bucket` };
    });
    cumulative += this.counts[this.bounds.length]!;
    values.push({ labels: { le: '+Inf' }, value: cumulative, metricName: `${this.name}_bucket` });
    values.push({ labels: {}, value: this.sum, metricName: `${this.name}_sum` });
    values.push({ labels: {}, value: cumulative, metricName: `${this.name}_count` });
    return {
      name: this.name,
      help: this.help,
      // prom-client's typings declare MetricType a numeric enum; its registry prints `type` as given, a string.
      type: 'histogram' as unknown as client.MetricType,
      values,
      aggregator: this.aggregator,
      collect: () => undefined,
    };
  }

  reset(): void {
    this.counts.fill(0);
    this.sum = 0;
  }
}
