// Unauthenticated operational routes, served on both listeners: /health (the database answers),
// /health/live (the process answers), /health/ready (it should get traffic: src/health.ts) and
// /metrics. Each answers one media type, and 406 to a client that accepts none of it, but for
// /health, which answers whatever `Accept` says, as it did before the others existed (issue 24:
// it stays as it is; a monitor asking it for text or HTML must not read the service as down).
import type pg from 'pg';
import { errors } from '../errors.js';
import type { Readiness } from '../health.js';
import type { Metrics } from '../metrics.js';
import { notAcceptable } from './accept.js';
import type { ResponseDoc, RouteSpec } from './types.js';

const notAcceptableDoc = (mediaType: string): ResponseDoc => ({
  description: `The client accepts no \`${mediaType}\` (\`Accept\`).`,
  errors: ['notAcceptable'],
});
const jsonOnly = {
  name: 'notJson',
  summary: 'A client that accepts HTML only',
  status: 406,
  headers: { accept: 'text/html' },
  response: errors.notAcceptable('application/json').body,
};

export const opsRoutes: RouteSpec<{ pool: pg.Pool; metrics: Metrics; readiness: Readiness }>[] = [
  {
    method: 'GET',
    path: '/health',
    auth: false,
    listeners: ['public', 'internal'],
    summary: 'Health: the database answers',
    description:
      'For orchestrators, /health/live and /health/ready say more; this one stays as it was: JSON whatever `Accept` says, no client error.',
    tag: 'operations',
    responses: {
      200: { description: 'The database answered `SELECT 1` within 2 s.', schema: 'Health' },
      503: { description: 'The database did not answer.', errors: ['unhealthy'] },
    },
    examples: [{ name: 'healthy', summary: 'The service is up', status: 200, response: { status: 'ok' } }],
    async handler(_req, { readiness }) {
      if (await readiness.databaseAnswers()) return { status: 200, body: { status: 'ok' } };
      const e = errors.unhealthy();
      return { status: e.httpStatus, body: e.body };
    },
  },
  {
    method: 'GET',
    path: '/health/live',
    negotiates: true,
    auth: false,
    listeners: ['public', 'internal'],
    summary: 'Liveness: the process answers',
    description:
      'Checks nothing else: a failing liveness probe means the process should be restarted, which a database or broker outage does not call for.',
    tag: 'operations',
    responses: { 200: { description: 'The process answers.', schema: 'Health' }, 406: notAcceptableDoc('application/json') },
    examples: [{ name: 'alive', summary: 'The process answers', status: 200, response: { status: 'ok' } }, jsonOnly],
    handler(req) {
      return notAcceptable(req.accept, 'application/json') ?? { status: 200, body: { status: 'ok' } };
    },
  },
  {
    method: 'GET',
    path: '/health/ready',
    negotiates: true,
    auth: false,
    listeners: ['public', 'internal'],
    summary: 'Readiness: the instance should get traffic',
    description:
      'The database answers within 2 s, every migration of this version is applied, the broker link is up, and ingest is not stalled ' +
      '(messages waiting with none acknowledged for INGEST_STALL_SECONDS); during a shutdown it is not ready.',
    tag: 'operations',
    responses: {
      200: { description: 'Every check is ok.', schema: 'Readiness' },
      406: notAcceptableDoc('application/json'),
      503: { description: 'A check failed, or the service is shutting down: the reasons.', schema: 'Readiness' },
    },
    examples: [
      {
        name: 'ready',
        summary: 'Every check ok',
        status: 200,
        response: { status: 'ready', checks: { database: 'ok', migrations: 'ok', broker: 'ok', ingest: 'ok' } },
      },
      jsonOnly,
    ],
    async handler(req, { readiness }) {
      const refused = notAcceptable(req.accept, 'application/json');
      if (refused) return refused;
      const report = await readiness.check();
      if (report.ready) return { status: 200, body: { status: 'ready', checks: report.checks } };
      return { status: 503, body: { status: 'not ready', reasons: report.reasons, checks: report.checks } };
    },
  },
  {
    method: 'GET',
    path: '/metrics',
    negotiates: true,
    auth: false,
    listeners: ['public', 'internal'],
    summary: 'Prometheus metrics',
    description: 'Every metric and what it means: docs/operations.md.',
    tag: 'operations',
    responses: {
      200: {
        description: 'Prometheus text format (process, Node.js, HTTP, database pool, broker link, ingest, readiness).',
        schema: { type: 'string' },
        contentType: 'text/plain',
      },
      406: notAcceptableDoc('text/plain'),
    },
    examples: [
      { name: 'scrape', summary: 'A scrape', status: 200, response: 'http_requests_total{method="GET",route="/health",status="200"} 3\n' },
      {
        name: 'notText',
        summary: 'A client that accepts JSON only',
        status: 406,
        headers: { accept: 'application/json' },
        response: errors.notAcceptable('text/plain').body,
      },
    ],
    async handler(req, { metrics }) {
      return (
        notAcceptable(req.accept, 'text/plain') ?? {
          status: 200,
          raw: await metrics.registry.metrics(),
          contentType: metrics.registry.contentType,
        }
      );
    },
  },
];
