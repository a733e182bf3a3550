// Device endpoints (interface.md §4.2 without actuation, §4.4 internal): HTTP in and out.
import { listFiltersOf, pageOf, pagination, type Page } from '../../http/query.js';
import type { Request, Route } from '../../http/types.js';
import { parseTemplateId } from '../sql.js';
import { createOptions } from './input.js';
import type { DeviceQuery } from './repo.js';
import type { DeviceService } from './service.js';
import { deviceView } from './views.js';

/** GET /device and GET /internal/device: `idsOnly` (all ids, no paging) or a page. */
async function listHandler(devices: DeviceService, req: Request, internal: boolean) {
  const page = req.values.idsOnly ? undefined : pageOf(req.values);
  const filters = listFiltersOf(req.values); // the internal listing's schema has no attr_type
  if (!page) return { status: 200, body: await devices.listIds(req.tenant, { filters }) };
  if (!internal) return publicPage(devices, req.tenant, { filters }, page);
  const { devices: found, matches } = await devices.listInternal(req.tenant, { filters }, page);
  return { status: 200, body: { devices: found.map((d) => deviceView(d, 'internal')), pagination: pagination(page, matches) } };
}

/** A public page, written from the cached JSON of each device's view. */
async function publicPage(devices: DeviceService, tenant: string, q: DeviceQuery, page: Page) {
  const { views, matches } = await devices.listJson(tenant, q, page);
  return { status: 200, raw: `{"devices":[${views.join(',')}],"pagination":${JSON.stringify(pagination(page, matches))}}` };
}

export function deviceRoutes(devices: DeviceService): Route[] {
  return [
    {
      method: 'POST',
      path: '/device',
      body: 'json',
      async handler(req) {
        const opts = createOptions(req.values);
        const r = await devices.create(req.tenant, opts, req.body);
        const body = r.verbose
          ? { message: 'device created', devices: r.devices.map((d) => deviceView(d)) }
          : { message: 'devices created', devices: r.devices };
        return { status: 200, body };
      },
    },
    {
      method: 'GET',
      path: '/device',
      handler: (req) => listHandler(devices, req, false),
    },
    {
      method: 'DELETE',
      path: '/device',
      async handler(req) {
        const removed = await devices.removeAll(req.tenant);
        return { status: 200, body: { removed_devices: removed.map((d) => deviceView(d)), result: 'ok' } };
      },
    },
    {
      method: 'GET',
      path: '/device/:id',
      async handler(req) {
        return { status: 200, raw: await devices.viewJson(req.tenant, req.params.id!) };
      },
    },
    {
      method: 'PUT',
      path: '/device/:id',
      body: 'json',
      async handler(req) {
        const d = await devices.update(req.tenant, req.params.id!, req.body);
        return { status: 200, body: { message: 'device updated', device: deviceView(d) } };
      },
    },
    {
      method: 'DELETE',
      path: '/device/:id',
      async handler(req) {
        const d = await devices.remove(req.tenant, req.params.id!);
        return { status: 200, body: { removed_device: deviceView(d), result: 'ok' } };
      },
    },
    {
      method: 'GET',
      path: '/device/template/:template_id',
      async handler(req) {
        const page = pageOf(req.values);
        const templateId = parseTemplateId(req.params.template_id!);
        // An unknown (or malformed) template id is an empty page, not an error.
        if (templateId === undefined) return { status: 200, body: { devices: [], pagination: pagination(page, 0) } };
        return publicPage(devices, req.tenant, { filters: noFilters(), templateId }, page);
      },
    },
    {
      method: 'GET',
      path: '/internal/device',
      listener: 'internal',
      handler: (req) => listHandler(devices, req, true),
    },
    {
      method: 'GET',
      path: '/internal/device/:id',
      listener: 'internal',
      async handler(req) {
        return { status: 200, body: deviceView(await devices.getInternal(req.tenant, req.params.id!), 'internal') };
      },
    },
  ];
}

const noFilters = () => ({ label: undefined, attrs: [], attrTypes: [], sortByLabel: false });
