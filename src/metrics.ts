// Prometheus metrics (prom-client), one registry per service instance so that tests can run
// several instances in one process. Ingest metrics are added by the ingest module.
import client from 'prom-client';

export interface Metrics {
  registry: client.Registry;
  observeHttp(method: string, route: string, status: number, seconds: number): void;
}

export function createMetrics(): Metrics {
  const registry = new client.Registry();
  client.collectDefaultMetrics({ register: registry });
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
  };
}
