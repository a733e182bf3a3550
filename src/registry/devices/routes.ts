// Device endpoints (interface.md §4.2 without actuation, §4.4 internal): HTTP in and out, and
// what the API description says of each; rules live in the service.
import type pg from 'pg';
import { lastValuesJson, latestValues, type LatestRow } from '../../history/latest.js';
import { listFiltersOf, pageOf, pagination } from '../../http/query.js';
import type { Request, RouteSpec } from '../../http/types.js';
import { BODY_ERRORS, DEV, KEY, LIST_ERRORS, T, TIME, bareDevice, device, deviceAttrs, err, page1 } from '../../openapi/examples.js';
import { deviceCreateBody, deviceUpdateBody } from '../../schemas/devices.js';
import { deviceIdParam, templateIdParam } from '../../schemas/params.js';
import { FILTER_ERRORS, PAGE_ERRORS, filterParams, flag, pageParams } from '../../schemas/queries.js';
import { ref } from '../../schemas/responses.js';
import type { Page } from '../paging.js';
import { parseTemplateId } from '../sql.js';
import { createOptions } from './input.js';
import type { DeviceService } from './service.js';
import type { DeviceQuery, DeviceRecord } from './types.js';
import { deviceView } from './views.js';

type Deps = { devices: DeviceService; pool: pg.Pool };

const lastValues = flag(
  'Add `last_values`: each attribute\'s latest value and its time (`{label: {"ts", "value"}}`, labels without a value left out), ' +
    'read in one query (for a list: one for the whole page).',
);

/** Views with `"last_values"` added before their closing brace (one query for all of them). */
async function withLastValues(pool: pg.Pool, tenant: string, views: string[]): Promise<string[]> {
  if (views.length === 0) return views;
  const ids = views.map((v) => (JSON.parse(v) as { id: string }).id);
  const rows = await latestValues(pool, tenant, { devices: ids }, undefined);
  const byDevice = new Map<string, LatestRow[]>();
  for (const r of rows) byDevice.set(r.device_id, [...(byDevice.get(r.device_id) ?? []), r]);
  return views.map((v, i) => `${v.slice(0, -1)},"last_values":${lastValuesJson(byDevice.get(ids[i]!) ?? [])}}`);
}

const idsOnly = {
  ...flag('Answer every matching id (filters apply) as an array; page_size and page_num are then not read.'),
  'x-ignores': ['page_num', 'page_size'],
};

/** GET /device and GET /internal/device: `idsOnly` (all ids, no paging) or a page. */
async function listHandler(devices: DeviceService, req: Request, internal: boolean, pool?: pg.Pool) {
  const page = req.values.idsOnly ? undefined : pageOf(req.values);
  const filters = listFiltersOf(req.values); // the internal listing's schema has no attr_type
  const status = await devices.statusQuery(req.values.status as string | undefined);
  if (!page) return { status: 200, body: await devices.listIds(req.tenant, { filters, status }) };
  const withStatus = req.values.withStatus === true;
  if (!internal)
    return publicPage(devices, req.tenant, { filters, status, withStatus }, page, req.values.lastValues === true ? pool : undefined);
  const { devices: found, matches } = await devices.listInternal(req.tenant, { filters, status }, page);
  const views = found.map((d) => internalView(devices, req.tenant, d, withStatus || status !== undefined));
  return { status: 200, body: { devices: views, pagination: pagination(page, matches) } };
}

/** An internal view, with `last_seen` and `status` when asked. */
function internalView(devices: DeviceService, tenant: string, d: DeviceRecord, withStatus: boolean): object {
  const view = deviceView(d, 'internal');
  return withStatus ? { ...view, ...devices.statusFields(tenant, d.id) } : view;
}

/** A public page, written from the cached JSON of each device's view. */
async function publicPage(devices: DeviceService, tenant: string, q: DeviceQuery, page: Page, lastValuesFrom?: pg.Pool) {
  const listed = await devices.listJson(tenant, q, page);
  const { matches } = listed;
  const views = lastValuesFrom ? await withLastValues(lastValuesFrom, tenant, listed.views) : listed.views;
  return { status: 200, raw: `{"devices":[${views.join(',')}],"pagination":${JSON.stringify(pagination(page, matches))}}` };
}

/** GET /device?status= (docs/live.md). */
const statusParam = {
  type: 'string',
  enum: ['online', 'offline'],
  'x-error': { enum: { error: 'badQuery', message: 'status must be online or offline, got "{input}"' } },
  description:
    'Only devices `online` (a stored message within their inactivity timeout: the largest `offline_after` of their templates, ' +
    'else DEVICE_OFFLINE_AFTER_SECONDS) or `offline`. The views then carry `last_seen` and `status` (as with `withStatus`).',
};

/**
 * Opt-in, so that answers without it stay exactly as the contract has them. No default: the
 * checked query of a request without it is the same as before.
 */
const withStatusParam = {
  type: 'boolean',
  description:
    'Add `last_seen` (when its last stored message was received; null if none) and `status` (`online`|`offline`) to each device view ' +
    '(docs/live.md). `true`, `1` (any case) or the bare flag (`?withStatus`) are true; any other value is false.',
};

const noFilters = () => ({ label: undefined, attrs: [], attrTypes: [], sortByLabel: false });

export const deviceRoutes: RouteSpec<Deps>[] = [
  {
    method: 'POST',
    path: '/device',
    summary: 'Create devices',
    description:
      'Checked in this order: the body is JSON, `count`, `verbose`, the body schema, `id`, the override list, the templates (404), ' +
      'repeated attributes, the override list against the templates. All devices of one request are created in one transaction.',
    tag: 'devices',
    query: (l) => ({
      type: 'object',
      properties: {
        count: {
          type: 'integer',
          minimum: 1,
          maximum: l.maxDeviceCount,
          default: 1,
          description: `Number of devices to create (at most ${l.maxDeviceCount}, MAX_DEVICE_COUNT), labelled \`<label>_0\` … \`<label>_<count-1>\`, in one transaction.`,
          'x-error': { type: 'countNotInteger', minimum: 'countNotInteger', maximum: 'countTooLarge' },
        },
        verbose: flag('Answer the full device (single creation only).'),
      },
      'x-error-order': ['countNotInteger', 'countTooLarge'],
    }),
    body: { read: 'json', schema: deviceCreateBody },
    responses: {
      200: { description: '`{id, label}` of each device; with verbose=true the full device.', schema: 'DevicesCreated' },
      400: {
        description: 'Bad query, body, override list or id.',
        errors: [
          ...BODY_ERRORS,
          'countNotInteger',
          'countTooLarge',
          'verboseWithCount',
          'badDeviceId',
          'deviceIdWithCount',
          'deviceIdInUse',
          'missingOverrideLabel',
          'repeatedAttributes',
          'unknownTemplateInAttrList',
          'pskOverride',
          'pskMetadataOverride',
        ],
      },
      404: {
        description: 'Unknown template, or an unknown attribute of the override list (HTTP 404 with body status 400, as in the reference).',
        errors: ['noSuchTemplate', 'unknownOverrideAttr', 'unknownOverrideMetadata'],
      },
      500: { description: 'No free id after 10 tries, or an unexpected failure.', errors: ['deviceIdGenerationFailed', 'internal'] },
    },
    examples: [
      {
        name: 'created',
        summary: 'Two devices of template 1',
        query: { count: 2 },
        body: { label: 'sensor', templates: [T] },
        status: 200,
        response: {
          message: 'devices created',
          devices: [
            { id: '7f3a9c', label: 'sensor_0' },
            { id: '0b12ee', label: 'sensor_1' },
          ],
        },
      },
      {
        name: 'verbose',
        summary: 'One device with a chosen id, answered in full',
        query: { verbose: 'true' },
        body: { label: 'kitchen', templates: [T], id: 'c0ffee' },
        status: 200,
        response: { message: 'device created', devices: [device('c0ffee', 'kitchen_0')] },
      },
      {
        name: 'unknownTemplate',
        summary: 'An unknown template',
        body: { label: 'x', templates: [999999] },
        status: 404,
        response: err('noSuchTemplate', 999999),
      },
      {
        name: 'badCount',
        summary: 'count not an integer',
        query: { count: 'abc' },
        body: { label: 'x', templates: [T] },
        status: 400,
        response: err('countNotInteger'),
      },
      {
        name: 'verboseWithCount',
        summary: 'verbose with count 2',
        query: { count: 2, verbose: 'true' },
        body: { label: 'x', templates: [T] },
        status: 400,
        response: err('verboseWithCount'),
      },
      {
        name: 'badId',
        summary: 'An id that is not 2-6 hex characters',
        body: { label: 'x', templates: [T], id: 'xyz' },
        status: 400,
        response: err('badDeviceId'),
      },
      {
        name: 'noLabel',
        summary: 'label missing',
        body: { templates: [T] },
        status: 400,
        response: err('validation', { label: ['Missing data for required field.'] }),
      },
    ],
    async handler(req, { devices }) {
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
    summary: 'List devices',
    tag: 'devices',
    query: (l) => ({
      type: 'object',
      properties: { ...pageParams(l), idsOnly, ...filterParams(true), status: statusParam, withStatus: withStatusParam, lastValues },
      'x-error-order': [...PAGE_ERRORS, ...FILTER_ERRORS],
    }),
    responses: {
      200: { description: 'One page, or with idsOnly every matching id.', schema: { oneOf: [ref('DeviceList'), ref('DeviceIds')] } },
      400: { description: 'Bad paging or filter parameters, checked in this order.', errors: [...LIST_ERRORS, 'badQuery'] },
    },
    examples: [
      {
        name: 'page',
        summary: 'The first page of 2, by label',
        query: { page_size: 2, sortBy: 'label' },
        status: 200,
        response: { devices: [bareDevice, device()], pagination: page1 },
      },
      { name: 'ids', summary: 'Every id (bare flag)', query: { idsOnly: '' }, status: 200, response: [DEV, 'd4e5f6'] },
      {
        name: 'filtered',
        summary: 'Devices with serial SN-0 and an actuator',
        query: { attr: ['serial=SN-0'], attr_type: ['actuator'] },
        status: 200,
        response: { devices: [device()], pagination: page1 },
      },
      {
        name: 'lastValues',
        summary: 'The same devices with their latest values',
        query: { attr: ['serial=SN-0'], attr_type: ['actuator'], lastValues: 'true' },
        status: 200,
        response: {
          devices: [{ ...device(), last_values: { temperature: { ts: '2026-05-01T12:01:00.000000Z', value: 22 } } }],
          pagination: page1,
        },
      },
      {
        name: 'pageTooLarge',
        summary: 'page_size above MAX_PAGE_SIZE',
        query: { page_size: 5000 },
        status: 400,
        response: err('pageSizeTooLarge', 1000),
      },
    ],
    handler: (req, { devices, pool }) => listHandler(devices, req, false, pool),
  },
  {
    method: 'DELETE',
    path: '/device',
    summary: 'Delete every device',
    description: 'The MQTT sessions of the removed devices are closed.',
    tag: 'devices',
    responses: { 200: { description: 'The removed devices.', schema: 'DevicesRemoved' } },
    examples: [
      { name: 'removed', summary: 'Every device', status: 200, response: { removed_devices: [device(), bareDevice], result: 'ok' } },
    ],
    async handler(req, { devices }) {
      const removed = await devices.removeAll(req.tenant);
      return { status: 200, body: { removed_devices: removed.map((d) => deviceView(d)), result: 'ok' } };
    },
  },
  {
    method: 'GET',
    path: '/device/:id',
    summary: 'Get a device',
    description: 'A `psk` attribute never shows its key here.',
    tag: 'devices',
    params: { id: deviceIdParam },
    query: () => ({ type: 'object', properties: { withStatus: withStatusParam, lastValues } }),
    responses: {
      200: {
        description: 'The device; with `lastValues`, also `last_values`.',
        schema: { anyOf: [ref('Device'), ref('DeviceWithLastValues')] },
      },
      404: { description: 'No such device.', errors: ['noSuchDevice'] },
    },
    exampleParams: { id: DEV },
    examples: [
      { name: 'found', summary: 'Device a1b2c3', status: 200, response: device() },
      {
        name: 'lastValues',
        summary: 'Device a1b2c3 with its latest values',
        query: { lastValues: 'true' },
        status: 200,
        response: { ...device(), last_values: { temperature: { ts: '2026-05-01T12:01:00.000000Z', value: 22 } } },
      },
      { name: 'unknown', summary: 'No such device', params: { id: 'ffffff' }, status: 404, response: err('noSuchDevice', 'ffffff') },
    ],
    async handler(req, { devices, pool }) {
      const view = await devices.viewJson(req.tenant, req.params.id!, req.values.withStatus === true);
      if (req.values.lastValues !== true) return { status: 200, raw: view };
      return { status: 200, raw: (await withLastValues(pool, req.tenant, [view]))[0]! };
    },
  },
  {
    method: 'PUT',
    path: '/device/:id',
    summary: 'Replace a device',
    description:
      'Replaces label, templates and the override list; keys of `psk` attributes still present are kept. The body is checked before the device is looked up.',
    tag: 'devices',
    params: { id: deviceIdParam },
    body: { read: 'json', schema: deviceUpdateBody },
    responses: {
      200: { description: 'The device, with `updated`.', schema: 'DeviceUpdated' },
      400: {
        description: 'Bad body or override list.',
        errors: [
          ...BODY_ERRORS,
          'missingOverrideLabel',
          'repeatedAttributes',
          'unknownTemplateInAttrList',
          'pskOverride',
          'pskMetadataOverride',
        ],
      },
      404: {
        description: 'No such device or template, or an unknown attribute of the override list (HTTP 404 with body status 400).',
        errors: ['noSuchDevice', 'noSuchTemplate', 'unknownOverrideAttr', 'unknownOverrideMetadata'],
      },
    },
    exampleParams: { id: DEV },
    examples: [
      {
        name: 'updated',
        summary: 'A new label and its own serial',
        body: { label: 'sensor-renamed', templates: [T], attrs: [{ label: 'serial', static_value: 'SN-42' }] },
        status: 200,
        response: {
          message: 'device updated',
          device: {
            ...device(DEV, 'sensor-renamed'),
            updated: TIME,
            attrs: {
              [String(T)]: deviceAttrs().map((a) =>
                a.label === 'serial' ? { ...a, static_value: 'SN-42', is_static_overridden: true } : a,
              ),
            },
          },
        },
      },
      {
        name: 'noOverrideLabel',
        summary: 'An override without label',
        body: { label: 'x', templates: [T], attrs: [{ static_value: 'SN-1' }] },
        status: 400,
        response: err('missingOverrideLabel'),
      },
      {
        name: 'unknown',
        summary: 'No such device',
        params: { id: 'ffffff' },
        body: { label: 'x', templates: [T] },
        status: 404,
        response: err('noSuchDevice', 'ffffff'),
      },
    ],
    async handler(req, { devices }) {
      const d = await devices.update(req.tenant, req.params.id!, req.body);
      return { status: 200, body: { message: 'device updated', device: deviceView(d) } };
    },
  },
  {
    method: 'DELETE',
    path: '/device/:id',
    summary: 'Delete a device',
    description: 'Its MQTT session is closed.',
    tag: 'devices',
    params: { id: deviceIdParam },
    responses: {
      200: { description: 'The removed device.', schema: 'DeviceRemoved' },
      404: { description: 'No such device.', errors: ['noSuchDevice'] },
    },
    exampleParams: { id: DEV },
    examples: [
      { name: 'removed', summary: 'Device a1b2c3', status: 200, response: { removed_device: device(), result: 'ok' } },
      { name: 'unknown', summary: 'No such device', params: { id: 'ffffff' }, status: 404, response: err('noSuchDevice', 'ffffff') },
    ],
    async handler(req, { devices }) {
      const d = await devices.remove(req.tenant, req.params.id!);
      return { status: 200, body: { removed_device: deviceView(d), result: 'ok' } };
    },
  },
  {
    method: 'GET',
    path: '/device/template/:template_id',
    summary: 'List the devices of a template',
    description: 'An unknown template is an empty page. `status`, `withStatus` and `lastValues` as on GET /device.',
    tag: 'devices',
    params: { template_id: templateIdParam },
    query: (l) => ({
      type: 'object',
      properties: { ...pageParams(l), status: statusParam, withStatus: withStatusParam, lastValues },
      'x-error-order': [...PAGE_ERRORS, 'badQuery'],
    }),
    responses: {
      200: { description: 'One page.', schema: 'DeviceList' },
      400: { description: 'Bad paging parameters, checked in this order, or a bad status.', errors: [...PAGE_ERRORS, 'badQuery'] },
    },
    exampleParams: { template_id: T },
    examples: [
      { name: 'page', summary: 'Devices of template 1', status: 200, response: { devices: [device()], pagination: page1 } },
      {
        name: 'lastValues',
        summary: 'Devices of template 1 with their latest values',
        query: { lastValues: 'true' },
        status: 200,
        response: {
          devices: [{ ...device(), last_values: { temperature: { ts: '2026-05-01T12:01:00.000000Z', value: 22 } } }],
          pagination: page1,
        },
      },
      {
        name: 'unknown',
        summary: 'An unknown template: an empty page',
        params: { template_id: 999999 },
        status: 200,
        response: { devices: [], pagination: { page: 1, total: 0, has_next: false, next_page: null } },
      },
      { name: 'pageSizeZero', summary: 'page_size 0', query: { page_size: 0 }, status: 400, response: err('pageSizeTooSmall') },
    ],
    async handler(req, { devices, pool }) {
      const page = pageOf(req.values);
      const templateId = parseTemplateId(req.params.template_id!);
      // An unknown (or malformed) template id is an empty page, not an error.
      if (templateId === undefined) return { status: 200, body: { devices: [], pagination: pagination(page, 0) } };
      const status = await devices.statusQuery(req.values.status as string | undefined);
      const q = { filters: noFilters(), templateId, status, withStatus: req.values.withStatus === true };
      return publicPage(devices, req.tenant, q, page, req.values.lastValues === true ? pool : undefined);
    },
  },
];

/** The internal listener's device endpoints (interface.md §4.4): generated keys show. */
export const internalDeviceRoutes: RouteSpec<Deps>[] = [
  {
    method: 'GET',
    path: '/internal/device',
    listeners: ['internal'],
    summary: 'List devices (internal)',
    description: 'As GET /device, without attr_type; generated keys show as `static_value`.',
    tag: 'internal',
    query: (l) => ({
      type: 'object',
      properties: { ...pageParams(l), idsOnly, ...filterParams(false), status: statusParam, withStatus: withStatusParam },
      'x-error-order': [...PAGE_ERRORS, ...FILTER_ERRORS],
    }),
    responses: {
      200: {
        description: 'One page, or with idsOnly every matching id.',
        schema: { oneOf: [ref('InternalDeviceList'), ref('DeviceIds')] },
      },
      400: { description: 'Bad paging or filter parameters, checked in this order.', errors: [...LIST_ERRORS, 'badQuery'] },
    },
    examples: [
      {
        name: 'page',
        summary: 'Devices with the label prefix sensor',
        query: { label: 'sensor' },
        status: 200,
        response: { devices: [device(DEV, 'sensor_0', KEY)], pagination: page1 },
      },
      { name: 'ids', summary: 'Every id', query: { idsOnly: 'true' }, status: 200, response: [DEV, 'd4e5f6'] },
      { name: 'pageZero', summary: 'page_num 0', query: { page_num: 0 }, status: 400, response: err('pageNumTooSmall') },
    ],
    handler: (req, { devices }) => listHandler(devices, req, true),
  },
  {
    method: 'GET',
    path: '/internal/device/:id',
    listeners: ['internal'],
    summary: 'Get a device (internal)',
    description: "As GET /device/{id}; a generated key shows as its attribute's `static_value`.",
    tag: 'internal',
    params: { id: deviceIdParam },
    query: () => ({ type: 'object', properties: { withStatus: withStatusParam } }),
    responses: {
      200: { description: 'The device with its keys.', schema: 'InternalDevice' },
      404: { description: 'No such device.', errors: ['noSuchDevice'] },
    },
    exampleParams: { id: DEV },
    examples: [
      { name: 'found', summary: 'Device a1b2c3 with its key', status: 200, response: device(DEV, 'sensor_0', KEY) },
      { name: 'unknown', summary: 'No such device', params: { id: 'ffffff' }, status: 404, response: err('noSuchDevice', 'ffffff') },
    ],
    async handler(req, { devices }) {
      return {
        status: 200,
        body: internalView(devices, req.tenant, await devices.getInternal(req.tenant, req.params.id!), req.values.withStatus === true),
      };
    },
  },
];
