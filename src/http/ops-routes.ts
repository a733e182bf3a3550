// Unauthenticated operational routes, served on both listeners: /health and /metrics.
import type pg from 'pg';
import { errors } from '../errors.js';
import type { Metrics } from '../metrics.js';
import type { Listener, Route } from './types.js';

export function opsRoutes({ pool, metrics }: { pool: pg.Pool; metrics: Metrics }): Route[] {
  const health: Route['handler'] = async () => {
    try {
      await Promise.race([
        pool.query('SELECT 1'),
        new Promise((_, reject) => setTimeout(() => reject(new Error('timeout')), 2000).unref()),
      ]);
    } catch {
      const e = errors.unhealthy();
      return { status: e.httpStatus, body: e.body };
    }
    return { status: 200, body: { status: 'ok' } };
  };
  const scrape: Route['handler'] = async () => ({
    status: 200,
    raw: await metrics.registry.metrics(),
    contentType: metrics.registry.contentType,
  });
  const both = (listener: Listener): Route[] => [
    { method: 'GET', path: '/health', auth: false, listener, handler: health },
    { method: 'GET', path: '/metrics', auth: false, listener, handler: scrape },
  ];
  return [...both('public'), ...both('internal')];
}
