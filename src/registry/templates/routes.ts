// Template endpoints (interface.md §4.1): HTTP in and out; rules live in the service. Queries
// are checked before a handler runs (src/openapi/operations.ts names each route's schema).
import { listFiltersOf, pageOf, pagination } from '../../http/query.js';
import type { Route } from '../../http/types.js';
import type { TemplateService } from './service.js';
import type { AttrFormat } from './types.js';
import { templateText, templateView } from './views.js';

export function templateRoutes(templates: TemplateService): Route[] {
  return [
    {
      method: 'POST',
      path: '/template',
      body: 'json',
      async handler(req) {
        const t = await templates.create(req.tenant, req.body);
        return { status: 200, body: { result: 'ok', template: templateView(t) } };
      },
    },
    {
      method: 'GET',
      path: '/template',
      async handler(req) {
        const page = pageOf(req.values);
        const filters = listFiltersOf(req.values);
        const format = req.values.attr_format as AttrFormat;
        const { templates: found, matches } = await templates.list(req.tenant, filters, page);
        const views = found.map((t) => templateText(t, format)).join(',');
        return { status: 200, raw: `{"templates":[${views}],"pagination":${JSON.stringify(pagination(page, matches))}}` };
      },
    },
    {
      method: 'DELETE',
      path: '/template',
      async handler(req) {
        const removed = await templates.removeAll(req.tenant);
        return { status: 200, body: { removed: removed.map((t) => templateView(t, 'both', true)), result: 'ok' } };
      },
    },
    {
      method: 'GET',
      path: '/template/:id',
      async handler(req) {
        const t = await templates.get(req.tenant, req.params.id!);
        return { status: 200, raw: templateText(t, req.values.attr_format as AttrFormat) };
      },
    },
    {
      method: 'PUT',
      path: '/template/:id',
      body: 'json',
      async handler(req) {
        const t = await templates.update(req.tenant, req.params.id!, req.body);
        return { status: 200, body: { updated: templateView(t, 'both', true), result: 'ok' } };
      },
    },
    {
      method: 'DELETE',
      path: '/template/:id',
      async handler(req) {
        const t = await templates.remove(req.tenant, req.params.id!);
        return { status: 200, body: { removed: templateView(t, 'both', true), result: 'ok' } };
      },
    },
  ];
}
