// The description of every operation the service serves, keyed `METHOD /path/{param}`: what it
// does, its query schema (checked before the handler runs: src/openapi/routes.ts), its body and
// response schemas (src/schemas/), the errors it may answer (keys of src/errors.ts), and
// examples. At start the service refuses to run when this list and its routes differ, and the
// tests drive every example against the running service (test/openapi/).
//
// Examples are written against a fixture that the example test builds in a fresh tenant
// (docs/api.md): template 1 "Thermometer" (temperature: dynamic float; serial: static string
// "SN-0" with metadata unit "C"; led: actuator bool; key and spare: static psk), device a1b2c3
// (from template 1, a generated key on `key`, two temperature values in its history), device
// d4e5f6 (no templates). Template id 1 stands for the fixture template's id. Ids 999999 and
// ffffff name nothing.
import { errors } from '../errors.js';
import type { Listener } from '../http/types.js';
import type { QueryId } from '../schemas/queries.js';
import { ref } from '../schemas/responses.js';
import type { ErrorKey } from '../schemas/validator.js';

export interface ResponseDoc {
  description: string;
  /** A component name of src/schemas/responses.ts, or an inline schema. */
  schema?: string | object;
  contentType?: string;
  /** Error bodies this status may carry (their schemas: src/schemas/errors.ts). */
  errors?: ErrorKey[];
}

export interface Example {
  name: string;
  summary: string;
  /** Path parameters (default: the operation's `params`). */
  params?: Record<string, string | number>;
  query?: Record<string, string | number | string[]>;
  body?: unknown;
  status: number;
  /** The answer (none for 204). */
  response?: unknown;
  /** `no-devices`: the fixture without devices. */
  fixture?: 'no-devices';
}

export interface Operation {
  summary: string;
  description?: string;
  tag: string;
  /** Where it is served; default public only. */
  listeners?: Listener[];
  /** Without a token; default false. */
  public?: boolean;
  query?: QueryId;
  /** Path parameter schemas. */
  pathParams?: Record<string, object>;
  /** Example path parameters shared by the examples. */
  params?: Record<string, string | number>;
  body?: { schema: object; description?: string };
  responses: Record<number, ResponseDoc>;
  examples: Example[];
}

const body = (id: string, description?: string) => ({ schema: ref(id), ...(description ? { description } : {}) });
const err = (key: ErrorKey, ...args: unknown[]) => (errors[key] as (...a: unknown[]) => { body: unknown })(...args).body;

const TEMPLATE_ID = { type: 'integer', minimum: 1, description: 'A template id. Anything else names no template (404).' };
const DEVICE_ID = { type: 'string', description: 'A device id.' };

const T = 1;
const DEV = 'a1b2c3';
const TIME = '2026-05-01T12:00:00.000000+00:00';

const attr = (id: number, label: string, type: string, valueType: string, extra: Record<string, unknown> = {}) => ({
  id,
  label,
  type,
  value_type: valueType,
  ...(extra.static_value !== undefined ? { static_value: extra.static_value } : {}),
  ...(extra.is_static_overridden !== undefined ? { is_static_overridden: extra.is_static_overridden } : {}),
  template_id: String(T),
  created: TIME,
  ...(extra.metadata ? { metadata: extra.metadata } : {}),
});
const unit = (device: boolean) => ({ id: 3, label: 'unit', type: 'static', value_type: 'string', static_value: 'C', ...(device ? { is_static_overridden: false } : {}), created: TIME });
const templateAttrs = [
  attr(1, 'temperature', 'dynamic', 'float'),
  attr(2, 'serial', 'static', 'string', { static_value: 'SN-0', metadata: [unit(false)] }),
  attr(4, 'led', 'actuator', 'bool'),
  attr(5, 'key', 'static', 'psk'),
  attr(6, 'spare', 'static', 'psk'),
];
const deviceAttrs = (key?: string) => [
  attr(1, 'temperature', 'dynamic', 'float'),
  attr(2, 'serial', 'static', 'string', { static_value: 'SN-0', is_static_overridden: false, metadata: [unit(true)] }),
  attr(4, 'led', 'actuator', 'bool'),
  key ? attr(5, 'key', 'static', 'psk', { static_value: key, is_static_overridden: true }) : attr(5, 'key', 'static', 'psk'),
  attr(6, 'spare', 'static', 'psk'),
];
const templateBoth = (id: number | string = T, label = 'Thermometer') => ({
  id,
  label,
  created: TIME,
  attrs: templateAttrs,
  data_attrs: templateAttrs,
  config_attrs: [],
});
// a1b2c3 has had a key generated: it shows `updated`.
const device = (id = DEV, label = 'sensor_0', key?: string) => ({
  id,
  label,
  created: TIME,
  ...(id === DEV ? { updated: TIME } : {}),
  templates: [String(T)],
  attrs: { [String(T)]: deviceAttrs(key) },
});
const bareDevice = { id: 'd4e5f6', label: 'bare_0', created: TIME, templates: [], attrs: {} };
const KEY = '3f9a0c47e1b25d68a4c3f1e09b7d2a55';
const thermometerBody = {
  label: 'Thermometer',
  attrs: [
    { label: 'temperature', type: 'dynamic', value_type: 'float' },
    { label: 'serial', type: 'static', value_type: 'string', static_value: 'SN-0', metadata: [{ label: 'unit', type: 'static', value_type: 'string', static_value: 'C' }] },
    { label: 'led', type: 'actuator', value_type: 'bool' },
    { label: 'key', type: 'static', value_type: 'psk' },
    { label: 'spare', type: 'static', value_type: 'psk' },
  ],
};
const page1 = { page: 1, total: 1, has_next: false, next_page: null };
const history = (value: number, minute: number) => ({ device_id: DEV, ts: `2026-05-01T12:0${minute}:00.000000Z`, value, attr: 'temperature' });

const PAGE_ERRORS: ErrorKey[] = ['pagingNotIntegers', 'pageNumTooSmall', 'pageSizeTooSmall', 'pageSizeTooLarge'];
const LIST_ERRORS: ErrorKey[] = [...PAGE_ERRORS, 'attrFilterWithoutValue'];
const BODY_ERRORS: ErrorKey[] = ['validation', 'payloadNotJson'];

/** Template bodies: each attribute is also checked on its own (`failed to parse attr`). */
const templateBody = {
  schema: { allOf: [ref('templates.body'), { properties: { attrs: { items: ref('templates.attr') } } }] },
  description:
    'The body (`failed to parse input`), then each attribute in order (`failed to parse attr`: `static` attributes other than `psk` need ' +
    '`static_value`; labels are unique within the template and within an attribute\'s metadata).',
};

export const operations: Record<string, Operation> = {
  // ---- Operations ----
  'GET /health': {
    summary: 'Health: the database answers',
    tag: 'operations',
    public: true,
    listeners: ['public', 'internal'],
    responses: {
      200: { description: 'The database answered `SELECT 1` within 2 s.', schema: 'Health' },
      503: { description: 'The database did not answer.', errors: ['unhealthy'] },
    },
    examples: [{ name: 'healthy', summary: 'The service is up', status: 200, response: { status: 'ok' } }],
  },
  'GET /metrics': {
    summary: 'Prometheus metrics',
    tag: 'operations',
    public: true,
    listeners: ['public', 'internal'],
    responses: { 200: { description: 'Prometheus text format (process, HTTP, ingest metrics).', schema: { type: 'string' }, contentType: 'text/plain' } },
    examples: [{ name: 'scrape', summary: 'A scrape', status: 200, response: 'http_requests_total{method="GET",route="/health",status="200"} 3\n' }],
  },
  'GET /openapi.json': {
    summary: 'This API description (OpenAPI 3.1)',
    description: 'Generated once at start from the schemas that validate the requests; committed as docs/openapi.json (`npm run openapi`).',
    tag: 'operations',
    public: true,
    responses: { 200: { description: 'The document.', schema: 'OpenApiDocument' } },
    examples: [{ name: 'document', summary: 'The document', status: 200, response: { openapi: '3.1.0', info: { title: 'device-registry', version: '0.1.0' }, paths: {} } }],
  },

  // ---- Authentication ----
  'POST /auth': {
    summary: 'Get a token',
    description: 'The token goes into `Authorization: Bearer <jwt>` of every other request. Its lifetime is TOKEN_TTL_SECONDS.',
    tag: 'auth',
    public: true,
    body: body('auth.login', 'Not a JSON object: 400 `invalid mimetype`; then `missing username`, `missing password`.'),
    responses: {
      200: { description: 'A token.', schema: 'Token' },
      400: { description: 'Not a JSON object, or a field is missing.', errors: ['authInvalidMimetype', 'authMissingUsername', 'authMissingPassword'] },
      401: { description: 'Unknown user.', errors: ['authUnknownUser'] },
      403: { description: 'Wrong password.', errors: ['authWrongPassword'] },
      503: { description: 'The database is unavailable; retry later.', errors: ['unhealthy'] },
    },
    examples: [
      { name: 'token', summary: 'Credentials of the first admin', body: { username: 'admin', passwd: 'admin' }, status: 200, response: { jwt: 'eyJhbGciOiJIUzI1NiJ9.eyJzZXJ2aWNlIjoiYWRtaW4ifQ.c2lnbmF0dXJl' } },
      { name: 'noPassword', summary: 'passwd missing', body: { username: 'admin' }, status: 400, response: err('authMissingPassword') },
      { name: 'unknownUser', summary: 'No such user', body: { username: 'nobody', passwd: 'secret' }, status: 401, response: err('authUnknownUser') },
      { name: 'wrongPassword', summary: 'Wrong password', body: { username: 'admin', passwd: 'wrong' }, status: 403, response: err('authWrongPassword') },
    ],
  },
  'POST /auth/user': {
    summary: 'Create a user (admin profile only)',
    description: 'The user belongs to the tenant `service`; every registry entry is scoped to the tenant of the token.',
    tag: 'auth',
    body: body('auth.createUser'),
    responses: {
      201: { description: 'The user (never a password field).', schema: 'User' },
      400: { description: 'Invalid body.', errors: BODY_ERRORS },
      403: { description: 'The caller is not an admin.', errors: ['forbidden'] },
      409: { description: 'The username is taken.', errors: ['userExists'] },
    },
    examples: [
      {
        name: 'created',
        summary: 'A user in tenant acme',
        body: { username: 'alice', passwd: 's3cret', service: 'acme', profile: 'user' },
        status: 201,
        response: { id: 2, username: 'alice', service: 'acme', profile: 'user', created: TIME },
      },
      { name: 'taken', summary: 'Username taken', body: { username: 'admin', passwd: 's3cret', service: 'acme', profile: 'user' }, status: 409, response: err('userExists', 'admin') },
      {
        name: 'invalid',
        summary: 'Fields missing',
        body: { username: 'bob' },
        status: 400,
        response: err('validation', {
          passwd: ['Missing data for required field.'],
          service: ['Missing data for required field.'],
          profile: ['Missing data for required field.'],
        }),
      },
    ],
  },

  // ---- Templates ----
  'POST /template': {
    summary: 'Create a template',
    tag: 'templates',
    body: templateBody,
    responses: {
      200: { description: 'The template (integer id).', schema: 'TemplateCreated' },
      400: { description: 'Invalid body.', errors: BODY_ERRORS },
    },
    examples: [
      { name: 'created', summary: 'A thermometer model', body: thermometerBody, status: 200, response: { result: 'ok', template: templateBoth() } },
      { name: 'noLabel', summary: 'label missing', body: { attrs: [] }, status: 400, response: err('validation', { label: ['Missing data for required field.'] }) },
      {
        name: 'staticWithoutValue',
        summary: 'A static attribute without static_value',
        body: { label: 'x', attrs: [{ label: 'serial', type: 'static', value_type: 'string' }] },
        status: 400,
        response: err('validation', { static_value: ['Missing data for required field.'] }, 'failed to parse attr'),
      },
    ],
  },
  'GET /template': {
    summary: 'List templates',
    tag: 'templates',
    query: 'templates.list',
    responses: {
      200: { description: 'One page.', schema: 'TemplateList' },
      400: { description: 'Bad paging or filter parameters, checked in this order.', errors: LIST_ERRORS },
    },
    examples: [
      { name: 'page', summary: 'The first page', query: { page_size: 20 }, status: 200, response: { templates: [templateBoth()], pagination: page1 } },
      {
        name: 'filtered',
        summary: 'Templates with serial SN-0, attrs only, by label',
        query: { attr: ['serial=SN-0'], attr_format: 'single', sortBy: 'label' },
        status: 200,
        response: { templates: [{ id: T, label: 'Thermometer', created: TIME, attrs: templateAttrs }], pagination: page1 },
      },
      { name: 'pageZero', summary: 'page_num 0', query: { page_num: 0 }, status: 400, response: err('pageNumTooSmall') },
      { name: 'notIntegers', summary: 'page_size not an integer', query: { page_size: 'x' }, status: 400, response: err('pagingNotIntegers') },
      { name: 'attrWithoutValue', summary: 'attr without =', query: { attr: ['serial'] }, status: 400, response: err('attrFilterWithoutValue', 'serial') },
    ],
  },
  'DELETE /template': {
    summary: 'Delete every template',
    description: 'Nothing is removed when any device uses any template (404).',
    tag: 'templates',
    responses: {
      200: { description: 'The removed templates (string ids).', schema: 'TemplatesRemoved' },
      404: { description: 'Devices use templates.', errors: ['templatesInUse'] },
    },
    examples: [
      { name: 'removed', summary: 'No device uses them', fixture: 'no-devices', status: 200, response: { removed: [templateBoth(String(T))], result: 'ok' } },
      { name: 'inUse', summary: 'Devices use them', status: 404, response: err('templatesInUse') },
    ],
  },
  'GET /template/{id}': {
    summary: 'Get a template',
    tag: 'templates',
    query: 'templates.get',
    pathParams: { id: TEMPLATE_ID },
    params: { id: T },
    responses: {
      200: { description: 'The template (integer id) in the asked attr_format.', schema: 'TemplateInAnyFormat' },
      404: { description: 'No such template.', errors: ['noSuchTemplate'] },
    },
    examples: [
      { name: 'found', summary: 'Template 1', status: 200, response: templateBoth() },
      {
        name: 'split',
        summary: 'attr_format=split',
        query: { attr_format: 'split' },
        status: 200,
        response: { id: T, label: 'Thermometer', created: TIME, data_attrs: templateAttrs, config_attrs: [] },
      },
      { name: 'unknown', summary: 'No such template', params: { id: 999999 }, status: 404, response: err('noSuchTemplate', 999999) },
    ],
  },
  'PUT /template/{id}': {
    summary: 'Replace a template',
    description:
      'Replaces the label and the attribute list. An attribute whose (label, type) is still present keeps its id, overrides and keys; ' +
      'devices based on the template see the change at once. The body is checked before the template is looked up.',
    tag: 'templates',
    pathParams: { id: TEMPLATE_ID },
    params: { id: T },
    body: templateBody,
    responses: {
      200: { description: 'The template (string id).', schema: 'TemplateUpdated' },
      400: { description: 'Invalid body, or devices would get repeated attributes.', errors: [...BODY_ERRORS, 'repeatedAttributes'] },
      404: { description: 'No such template.', errors: ['noSuchTemplate'] },
    },
    examples: [
      {
        name: 'updated',
        summary: 'A new label, the same attributes',
        body: { ...thermometerBody, label: 'Thermometer v2' },
        status: 200,
        response: { updated: { ...templateBoth(String(T), 'Thermometer v2'), updated: TIME }, result: 'ok' },
      },
      { name: 'invalid', summary: 'label missing', body: { attrs: [] }, status: 400, response: err('validation', { label: ['Missing data for required field.'] }) },
      { name: 'unknown', summary: 'No such template', params: { id: 999999 }, body: thermometerBody, status: 404, response: err('noSuchTemplate', 999999) },
    ],
  },
  'DELETE /template/{id}': {
    summary: 'Delete a template',
    description: 'Devices based on it are detached from it; their attributes from it (with overrides and keys) disappear.',
    tag: 'templates',
    pathParams: { id: TEMPLATE_ID },
    params: { id: T },
    responses: {
      200: { description: 'The removed template (string id).', schema: 'TemplateRemoved' },
      404: { description: 'No such template.', errors: ['noSuchTemplate'] },
    },
    examples: [
      { name: 'removed', summary: 'Template 1', status: 200, response: { removed: templateBoth(String(T)), result: 'ok' } },
      { name: 'unknown', summary: 'No such template', params: { id: 999999 }, status: 404, response: err('noSuchTemplate', 999999) },
    ],
  },

  // ---- Devices ----
  'POST /device': {
    summary: 'Create devices',
    description:
      'Checked in this order: the body is JSON, `count`, `verbose`, the body schema, `id`, the override list, the templates (404), ' +
      'repeated attributes, the override list against the templates. All devices of one request are created in one transaction.',
    tag: 'devices',
    query: 'devices.create',
    body: body('devices.create'),
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
        response: { message: 'devices created', devices: [{ id: '7f3a9c', label: 'sensor_0' }, { id: '0b12ee', label: 'sensor_1' }] },
      },
      {
        name: 'verbose',
        summary: 'One device with a chosen id, answered in full',
        query: { verbose: 'true' },
        body: { label: 'kitchen', templates: [T], id: 'c0ffee' },
        status: 200,
        response: { message: 'device created', devices: [device('c0ffee', 'kitchen_0')] },
      },
      { name: 'unknownTemplate', summary: 'An unknown template', body: { label: 'x', templates: [999999] }, status: 404, response: err('noSuchTemplate', 999999) },
      { name: 'badCount', summary: 'count not an integer', query: { count: 'abc' }, body: { label: 'x', templates: [T] }, status: 400, response: err('countNotInteger') },
      { name: 'verboseWithCount', summary: 'verbose with count 2', query: { count: 2, verbose: 'true' }, body: { label: 'x', templates: [T] }, status: 400, response: err('verboseWithCount') },
      { name: 'badId', summary: 'An id that is not 2-6 hex characters', body: { label: 'x', templates: [T], id: 'xyz' }, status: 400, response: err('badDeviceId') },
      { name: 'noLabel', summary: 'label missing', body: { templates: [T] }, status: 400, response: err('validation', { label: ['Missing data for required field.'] }) },
    ],
  },
  'GET /device': {
    summary: 'List devices',
    tag: 'devices',
    query: 'devices.list',
    responses: {
      200: { description: 'One page, or with idsOnly every matching id.', schema: { oneOf: [ref('DeviceList'), ref('DeviceIds')] } },
      400: { description: 'Bad paging or filter parameters, checked in this order.', errors: LIST_ERRORS },
    },
    examples: [
      { name: 'page', summary: 'The first page of 2, by label', query: { page_size: 2, sortBy: 'label' }, status: 200, response: { devices: [bareDevice, device()], pagination: page1 } },
      { name: 'ids', summary: 'Every id (bare flag)', query: { idsOnly: '' }, status: 200, response: [DEV, 'd4e5f6'] },
      { name: 'filtered', summary: 'Devices with serial SN-0 and an actuator', query: { attr: ['serial=SN-0'], attr_type: ['actuator'] }, status: 200, response: { devices: [device()], pagination: page1 } },
      { name: 'pageTooLarge', summary: 'page_size above MAX_PAGE_SIZE', query: { page_size: 5000 }, status: 400, response: err('pageSizeTooLarge', 1000) },
    ],
  },
  'DELETE /device': {
    summary: 'Delete every device',
    description: 'The MQTT sessions of the removed devices are closed.',
    tag: 'devices',
    responses: { 200: { description: 'The removed devices.', schema: 'DevicesRemoved' } },
    examples: [{ name: 'removed', summary: 'Every device', status: 200, response: { removed_devices: [device(), bareDevice], result: 'ok' } }],
  },
  'GET /device/{id}': {
    summary: 'Get a device',
    description: 'A `psk` attribute never shows its key here.',
    tag: 'devices',
    pathParams: { id: DEVICE_ID },
    params: { id: DEV },
    responses: {
      200: { description: 'The device.', schema: 'Device' },
      404: { description: 'No such device.', errors: ['noSuchDevice'] },
    },
    examples: [
      { name: 'found', summary: 'Device a1b2c3', status: 200, response: device() },
      { name: 'unknown', summary: 'No such device', params: { id: 'ffffff' }, status: 404, response: err('noSuchDevice', 'ffffff') },
    ],
  },
  'PUT /device/{id}': {
    summary: 'Replace a device',
    description: 'Replaces label, templates and the override list; keys of `psk` attributes still present are kept. The body is checked before the device is looked up.',
    tag: 'devices',
    pathParams: { id: DEVICE_ID },
    params: { id: DEV },
    body: body('devices.update'),
    responses: {
      200: { description: 'The device, with `updated`.', schema: 'DeviceUpdated' },
      400: { description: 'Bad body or override list.', errors: [...BODY_ERRORS, 'missingOverrideLabel', 'repeatedAttributes', 'unknownTemplateInAttrList', 'pskOverride'] },
      404: {
        description: 'No such device or template, or an unknown attribute of the override list (HTTP 404 with body status 400).',
        errors: ['noSuchDevice', 'noSuchTemplate', 'unknownOverrideAttr', 'unknownOverrideMetadata'],
      },
    },
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
              [String(T)]: deviceAttrs().map((a) => (a.label === 'serial' ? { ...a, static_value: 'SN-42', is_static_overridden: true } : a)),
            },
          },
        },
      },
      { name: 'noOverrideLabel', summary: 'An override without label', body: { label: 'x', templates: [T], attrs: [{ static_value: 'SN-1' }] }, status: 400, response: err('missingOverrideLabel') },
      { name: 'unknown', summary: 'No such device', params: { id: 'ffffff' }, body: { label: 'x', templates: [T] }, status: 404, response: err('noSuchDevice', 'ffffff') },
    ],
  },
  'DELETE /device/{id}': {
    summary: 'Delete a device',
    description: 'Its MQTT session is closed.',
    tag: 'devices',
    pathParams: { id: DEVICE_ID },
    params: { id: DEV },
    responses: {
      200: { description: 'The removed device.', schema: 'DeviceRemoved' },
      404: { description: 'No such device.', errors: ['noSuchDevice'] },
    },
    examples: [
      { name: 'removed', summary: 'Device a1b2c3', status: 200, response: { removed_device: device(), result: 'ok' } },
      { name: 'unknown', summary: 'No such device', params: { id: 'ffffff' }, status: 404, response: err('noSuchDevice', 'ffffff') },
    ],
  },
  'GET /device/template/{template_id}': {
    summary: 'List the devices of a template',
    description: 'An unknown template is an empty page.',
    tag: 'devices',
    query: 'devices.byTemplate',
    pathParams: { template_id: TEMPLATE_ID },
    params: { template_id: T },
    responses: {
      200: { description: 'One page.', schema: 'DeviceList' },
      400: { description: 'Bad paging parameters, checked in this order.', errors: PAGE_ERRORS },
    },
    examples: [
      { name: 'page', summary: 'Devices of template 1', status: 200, response: { devices: [device()], pagination: page1 } },
      { name: 'unknown', summary: 'An unknown template: an empty page', params: { template_id: 999999 }, status: 200, response: { devices: [], pagination: { page: 1, total: 0, has_next: false, next_page: null } } },
      { name: 'pageSizeZero', summary: 'page_size 0', query: { page_size: 0 }, status: 400, response: err('pageSizeTooSmall') },
    ],
  },

  // ---- Actuation ----
  'PUT /device/{id}/actuate': {
    summary: 'Send a configuration message to a device',
    description:
      'Checked in this order: the device (404), the body (400), the labels (403: not `actuator` attributes). The JSON of `attrs` is ' +
      'published with QoS 1, not retained, to `<tenant>:<id>/config` and `/<tenant>/<id>/config`; 200 once the broker accepted it.',
    tag: 'actuation',
    pathParams: { id: DEVICE_ID },
    params: { id: DEV },
    body: body('actuation.body'),
    responses: {
      200: { description: 'Sent. The key has a leading space, as in the reference.', schema: 'ActuationSent' },
      400: { description: 'Not a JSON object with an object `attrs`.', errors: ['actuationBodyNotObject', 'payloadNotJson'] },
      403: { description: 'Some labels are not actuator attributes of the device.', errors: ['notConfigurable'] },
      404: { description: 'No such device.', errors: ['noSuchDevice'] },
      503: { description: 'The broker did not accept the message within ACTUATION_TIMEOUT_MS.', errors: ['brokerUnavailable'] },
    },
    examples: [
      { name: 'sent', summary: 'Switch the led on', body: { attrs: { led: true }, topic: '/admin/a1b2c3/config' }, status: 200, response: { ' status': 'configuration sent to device' } },
      { name: 'notConfigurable', summary: 'temperature is not an actuator', body: { attrs: { temperature: 20 } }, status: 403, response: err('notConfigurable', ['temperature']) },
      { name: 'badBody', summary: 'attrs not an object', body: { attrs: 5 }, status: 400, response: err('actuationBodyNotObject') },
      { name: 'unknown', summary: 'No such device', params: { id: 'ffffff' }, body: { attrs: { led: true } }, status: 404, response: err('noSuchDevice', 'ffffff') },
    ],
  },

  // ---- Pre-shared keys ----
  'POST /device/gen_psk/{id}': {
    summary: 'Generate pre-shared keys',
    description:
      'Checked in this order: key_length present, the device (404), key_length in range, the labels. A key is key_length random bytes; ' +
      'it is answered only here and replaces an earlier one. 204 when the device has no `psk` attribute and no `attrs` was given.',
    tag: 'pre-shared keys',
    query: 'psk.generate',
    pathParams: { id: DEVICE_ID },
    params: { id: DEV },
    responses: {
      200: { description: 'The new keys.', schema: 'KeyRecords' },
      204: { description: 'No `psk` attribute: nothing generated.' },
      400: { description: 'Bad key_length or labels.', errors: ['missingKeyLength', 'badKeyLength', 'pskUnknownAttrs', 'pskNotPskAttr'] },
      404: { description: 'No such device.', errors: ['noSuchDevice'] },
    },
    examples: [
      { name: 'generated', summary: 'A 16-byte key for `key`', query: { key_length: 16, attrs: 'key' }, status: 200, response: [{ attribute: 'key', psk: KEY }] },
      { name: 'none', summary: 'A device without psk attributes', params: { id: 'd4e5f6' }, query: { key_length: 16 }, status: 204 },
      { name: 'missing', summary: 'key_length missing', status: 400, response: err('missingKeyLength') },
      { name: 'outOfRange', summary: 'key_length 1024', query: { key_length: 1024 }, status: 400, response: err('badKeyLength') },
      { name: 'unknownDevice', summary: 'No such device (before the range)', params: { id: 'ffffff' }, query: { key_length: 0 }, status: 404, response: err('noSuchDevice', 'ffffff') },
      { name: 'unknownLabel', summary: 'An unknown label', query: { key_length: 16, attrs: 'key,nope' }, status: 400, response: err('pskUnknownAttrs') },
      { name: 'notPsk', summary: 'A label that is not psk', query: { key_length: 16, attrs: 'serial' }, status: 400, response: err('pskNotPskAttr') },
    ],
  },
  'PUT /device/{id}/attrs/{label}/psk': {
    summary: 'Copy a pre-shared key',
    description:
      'Copies the key of `from_dev_id`/`from_attr_label` to this device attribute; no link is kept. Checked in this order: both query ' +
      'parameters, the source device (404), the source attribute, this device (404), this attribute, a key at the source.',
    tag: 'pre-shared keys',
    query: 'psk.copy',
    pathParams: { id: DEVICE_ID, label: { type: 'string', description: 'The destination attribute.' } },
    params: { id: DEV, label: 'spare' },
    responses: {
      204: { description: 'Copied.' },
      400: { description: 'Missing parameters, an attribute that is not psk, or no key at the source.', errors: ['copyMissingSource', 'copyAttrNotPsk', 'copyNoSourceKey'] },
      404: { description: 'No such device or attribute.', errors: ['noSuchDevice', 'copyAttrNotFound'] },
    },
    examples: [
      { name: 'copied', summary: 'key -> spare', query: { from_dev_id: DEV, from_attr_label: 'key' }, status: 204 },
      { name: 'missing', summary: 'Source parameters missing', status: 400, response: err('copyMissingSource') },
      { name: 'notFound', summary: 'No such destination attribute', params: { id: DEV, label: 'nope' }, query: { from_dev_id: DEV, from_attr_label: 'key' }, status: 404, response: err('copyAttrNotFound', 'nope') },
      { name: 'notPsk', summary: 'Destination not psk', params: { id: DEV, label: 'serial' }, query: { from_dev_id: DEV, from_attr_label: 'key' }, status: 400, response: err('copyAttrNotPsk', 'serial') },
      { name: 'noKey', summary: 'No key at the source', query: { from_dev_id: DEV, from_attr_label: 'spare' }, status: 400, response: err('copyNoSourceKey', 'spare') },
    ],
  },

  // ---- History ----
  'GET /history/device/{id}/history': {
    summary: 'Stored attribute values of a device',
    description:
      'Same 401 bodies as every route. Values come from device messages (MQTT, docs/messaging.md). The operators are checked ' +
      'before the device: a bad value answers 400 naming the operator (lastN, then firstN, dateFrom, dateTo), whether or not the device exists.',
    tag: 'history',
    query: 'history.query',
    pathParams: { id: DEVICE_ID },
    params: { id: DEV },
    responses: {
      200: { description: 'One attr: an array; several or none: an object by label.', schema: { oneOf: [ref('HistorySeries'), ref('HistoryByLabel')] } },
      400: { description: 'A bad operator value.', errors: ['badHistoryQuery'] },
      404: { description: 'No such device.', errors: ['noSuchDevice'] },
    },
    examples: [
      { name: 'lastN', summary: 'The last two temperatures', query: { lastN: 2, attr: ['temperature'] }, status: 200, response: [history(22, 1), history(21.5, 0)] },
      { name: 'byLabel', summary: 'The last value of every attribute', query: { lastN: 1 }, status: 200, response: { temperature: [history(22, 1)], serial: [], led: [], key: [], spare: [] } },
      { name: 'badLastN', summary: 'lastN not an integer', query: { lastN: 'abc' }, status: 400, response: err('badHistoryQuery', 'lastN must be a non-negative integer, got "abc"') },
      { name: 'unknown', summary: 'No such device', params: { id: 'ffffff' }, status: 404, response: err('noSuchDevice', 'ffffff') },
    ],
  },

  // ---- Internal ----
  'GET /internal/device': {
    summary: 'List devices (internal)',
    description: 'As GET /device, without attr_type; generated keys show as `static_value`.',
    tag: 'internal',
    listeners: ['internal'],
    query: 'devices.internalList',
    responses: {
      200: { description: 'One page, or with idsOnly every matching id.', schema: { oneOf: [ref('InternalDeviceList'), ref('DeviceIds')] } },
      400: { description: 'Bad paging or filter parameters, checked in this order.', errors: LIST_ERRORS },
    },
    examples: [
      { name: 'page', summary: 'Devices with the label prefix sensor', query: { label: 'sensor' }, status: 200, response: { devices: [device(DEV, 'sensor_0', KEY)], pagination: page1 } },
      { name: 'ids', summary: 'Every id', query: { idsOnly: 'true' }, status: 200, response: [DEV, 'd4e5f6'] },
      { name: 'pageZero', summary: 'page_num 0', query: { page_num: 0 }, status: 400, response: err('pageNumTooSmall') },
    ],
  },
  'GET /internal/device/{id}': {
    summary: 'Get a device (internal)',
    description: 'As GET /device/{id}; a generated key shows as its attribute\'s `static_value`.',
    tag: 'internal',
    listeners: ['internal'],
    pathParams: { id: DEVICE_ID },
    params: { id: DEV },
    responses: {
      200: { description: 'The device with its keys.', schema: 'InternalDevice' },
      404: { description: 'No such device.', errors: ['noSuchDevice'] },
    },
    examples: [
      { name: 'found', summary: 'Device a1b2c3 with its key', status: 200, response: device(DEV, 'sensor_0', KEY) },
      { name: 'unknown', summary: 'No such device', params: { id: 'ffffff' }, status: 404, response: err('noSuchDevice', 'ffffff') },
    ],
  },
};
