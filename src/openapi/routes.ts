// GET /openapi.json: the document, built once at start (src/openapi/document.ts) from the
// declarations of every route, this one included, with the servers the client reached
// (src/openapi/served.ts).
import { errors } from '../errors.js';
import { notAcceptable } from '../http/accept.js';
import type { RouteSpec } from '../http/types.js';
import type { ServedOpenApi } from './served.js';

export const openApiRoutes: RouteSpec<{ openApi: ServedOpenApi }>[] = [
  {
    method: 'GET',
    path: '/openapi.json',
    negotiates: true,
    auth: false,
    listeners: ['public', 'internal'],
    summary: 'This API description (OpenAPI 3.1)',
    description:
      'Generated once at start from the schemas that validate the requests; committed as docs/openapi.json (`npm run openapi`). ' +
      'Served, its `servers` are the listener the client reached and the other one on the same host.',
    tag: 'operations',
    responses: {
      200: { description: 'The document.', schema: 'OpenApiDocument' },
      406: { description: 'The client accepts no `application/json` (`Accept`).', errors: ['notAcceptable'] },
    },
    examples: [
      {
        name: 'document',
        summary: 'The document',
        status: 200,
        response: { openapi: '3.1.0', info: { title: 'device-registry', version: '0.1.0' }, paths: {} },
      },
      {
        name: 'notJson',
        summary: 'A client that accepts HTML only',
        status: 406,
        headers: { accept: 'text/html' },
        response: errors.notAcceptable('application/json').body,
      },
    ],
    handler: (req, { openApi }) =>
      notAcceptable(req.accept, 'application/json') ?? {
        status: 200,
        raw: openApi.text({ listener: req.listener, host: req.host, forwardedHost: req.forwardedHost, forwardedProto: req.forwardedProto }),
      },
  },
];
