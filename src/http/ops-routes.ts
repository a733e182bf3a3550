// Unauthenticated operational routes, served on both listeners: /health and /metrics.
import type pg from 'pg';
import { errors } from '../errors.js';
import type { Metrics } from '../metrics.js';
import type { RouteSpec } from './types.js';

export const opsRoutes: RouteSpec<{ pool: pg.Pool; metrics: Metrics }>[] = [
  {
    method: 'GET',
    path: '/health',
    auth: false,
    listeners: ['public', 'internal'],
    summary: 'Health: the database answers',
    tag: 'operations',
    responses: {
      200: { description: 'The database answered `SELECT 1` within 2 s.', schema: 'Health' },
      503: { description: 'The database did not answer.', errors: ['unhealthy'] },
    },
    examples: [{ name: 'healthy', summary: 'The service is up', status: 200, response: { status: 'ok' } }],
    async handler(_req, { pool }) {
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
    },
  },
  {
    method: 'GET',
    path: '/metrics',
    auth: false,
    listeners: ['public', 'internal'],
    summary: 'Prometheus metrics',
    tag: 'operations',
    responses: {
      200: {
        description: 'Prometheus text format (process, HTTP, ingest metrics).',
        schema: { type: 'string' },
        contentType: 'text/plain',
      },
    },
    examples: [
      { name: 'scrape', summary: 'A scrape', status: 200, response: 'http_requests_total{method="GET",route="/health",status="200"} 3\n' },
    ],
    async handler(_req, { metrics }) {
      return { status: 200, raw: await metrics.registry.metrics(), contentType: metrics.registry.contentType };
    },
  },
];
