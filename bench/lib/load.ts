// One autocannon run, reduced to the figures the benchmarks report.
import autocannon, { type RawRequest } from 'autocannon';

export interface LoadResult {
  name: string;
  rps: number;
  p50: number;
  p99: number;
  /** Answers that were not 2xx, plus socket errors and timeouts: should be 0. */
  failures: number;
}

export interface LoadOptions {
  name: string;
  url: string;
  token?: string;
  seconds?: number;
  connections?: number;
  /** A path per request (e.g. a random device id); default the URL's own path. */
  path?: () => string;
}

export async function load(o: LoadOptions): Promise<LoadResult> {
  const headers: Record<string, string> = o.token ? { authorization: `Bearer ${o.token}` } : {};
  const next = o.path;
  const r = await autocannon({
    url: o.url,
    connections: o.connections ?? 50,
    duration: o.seconds ?? 10,
    headers,
    requests: next ? [{ setupRequest: (req: RawRequest) => ({ ...req, path: next() }) }] : undefined,
  });
  return {
    name: o.name,
    rps: Math.round(r.requests.average),
    p50: r.latency.p50,
    p99: r.latency.p99,
    failures: r.non2xx + r.errors + r.timeouts,
  };
}

export function table(rows: LoadResult[], baseline?: LoadResult): string {
  const head = ['case', 'req/s', 'p50 ms', 'p99 ms', baseline ? `req/s vs ${baseline.name}` : '', 'failures'];
  const lines = rows.map((r) => [
    r.name,
    String(r.rps),
    String(r.p50),
    String(r.p99),
    baseline ? (r.rps / baseline.rps).toFixed(2) : '',
    String(r.failures),
  ]);
  return [head, ['---', '---:', '---:', '---:', baseline ? '---:' : '', '---:'], ...lines].map((l) => `| ${l.join(' | ')} |`).join('\n');
}
