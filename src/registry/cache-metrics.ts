// Metrics of the registry's view caches (device and template views of the HTTP API): lookups
// answered from the cache or not, entries renewed before they expired, entries kept. Read from
// the services' own counts when scraped.
import client from 'prom-client';
import type { Metrics } from '../metrics.js';

export interface ViewCacheCounts {
  hits: number;
  misses: number;
  renewed: number;
  entries: number;
}

export function watchViewCaches(metrics: Metrics, caches: Record<'device' | 'template', () => ViewCacheCounts>): void {
  const registers = [metrics.registry];
  const kinds = Object.entries(caches);
  new client.Counter({
    name: 'registry_view_cache_lookups_total',
    help: 'Lookups of the device and template view caches (GET by id and list pages), by cache and result (hit, miss)',
    labelNames: ['cache', 'result'] as const,
    registers,
    collect() {
      this.reset();
      for (const [cache, counts] of kinds) {
        const { hits, misses } = counts();
        this.labels(cache, 'hit').inc(hits);
        this.labels(cache, 'miss').inc(misses);
      }
    },
  });
  new client.Counter({
    name: 'registry_view_cache_renewed_total',
    help: 'Cached views read again from the database before they reached REGISTRY_CACHE_MAX_AGE_SECONDS, because they were being read',
    labelNames: ['cache'] as const,
    registers,
    collect() {
      this.reset();
      for (const [cache, counts] of kinds) this.labels(cache).inc(counts().renewed);
    },
  });
  new client.Gauge({
    name: 'registry_view_cache_entries',
    help: 'Views kept in the device and template view caches',
    labelNames: ['cache'] as const,
    registers,
    collect() {
      for (const [cache, counts] of kinds) this.labels(cache).set(counts().entries);
    },
  });
}
