// GET /openapi.json: the document, built once at start (src/openapi/document.ts) from the
// declarations of every route, this one included.
import type { RouteSpec } from '../http/types.js';

export const openApiRoutes: RouteSpec<{ openApiText: string }>[] = [
  {
    method: 'GET',
    path: '/openapi.json',
    auth: false,
    summary: 'This API description (OpenAPI 3.1)',
    description: 'Generated once at start from the schemas that validate the requests; committed as docs/openapi.json (`npm run openapi`).',
    tag: 'operations',
    responses: { 200: { description: 'The document.', schema: 'OpenApiDocument' } },
    examples: [
      {
        name: 'document',
        summary: 'The document',
        status: 200,
        response: { openapi: '3.1.0', info: { title: 'device-registry', version: '0.1.0' }, paths: {} },
      },
    ],
    handler: (_req, { openApiText }) => ({ status: 200, raw: openApiText }),
  },
];
