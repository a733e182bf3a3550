// Template endpoints (interface.md §4.1): HTTP in and out, and what the API description says of
// each; rules live in the service. Queries are checked before a handler runs.
import { listFiltersOf, pageOf, pagination } from '../../http/query.js';
import type { BodyDecl, RouteSpec } from '../../http/types.js';
import { BODY_ERRORS, LIST_ERRORS, T, TIME, err, page1, templateAttrs, templateBoth, thermometerBody } from '../../openapi/examples.js';
import { templateIdParam } from '../../schemas/params.js';
import { FILTER_ERRORS, PAGE_ERRORS, filterParams, pageParams } from '../../schemas/queries.js';
import { templateAttrBody, templateBody } from '../../schemas/templates.js';
import type { TemplateService } from './service.js';
import type { AttrFormat } from './types.js';
import { templateText, templateView } from './views.js';

const attrFormat = {
  type: 'string',
  enum: ['both', 'single', 'split'],
  default: 'both',
  'x-lenient': true,
  description:
    '`both`: attrs, data_attrs and config_attrs; `single`: attrs only; `split`: data_attrs and config_attrs only. Any other value means `both`.',
};

/** Template bodies: each attribute is also checked on its own (`failed to parse attr`). */
const body: BodyDecl = {
  read: 'json',
  schema: { allOf: [templateBody, { type: 'object', properties: { attrs: { type: 'array', items: templateAttrBody } } }] },
  description:
    'The body (`failed to parse input`), then each attribute in order (`failed to parse attr`: `static` attributes other than `psk` need ' +
    "`static_value`; labels are unique within the template and within an attribute's metadata).",
};

export const templateRoutes: RouteSpec<{ templates: TemplateService }>[] = [
  {
    method: 'POST',
    path: '/template',
    summary: 'Create a template',
    tag: 'templates',
    body,
    responses: {
      200: { description: 'The template (integer id).', schema: 'TemplateCreated' },
      400: { description: 'Invalid body.', errors: BODY_ERRORS },
    },
    examples: [
      {
        name: 'created',
        summary: 'A thermometer model',
        body: thermometerBody,
        status: 200,
        response: { result: 'ok', template: templateBoth() },
      },
      {
        name: 'noLabel',
        summary: 'label missing',
        body: { attrs: [] },
        status: 400,
        response: err('validation', { label: ['Missing data for required field.'] }),
      },
      {
        name: 'staticWithoutValue',
        summary: 'A static attribute without static_value',
        body: { label: 'x', attrs: [{ label: 'serial', type: 'static', value_type: 'string' }] },
        status: 400,
        response: err('validation', { static_value: ['Missing data for required field.'] }, 'failed to parse attr'),
      },
    ],
    async handler(req, { templates }) {
      const t = await templates.create(req.tenant, req.body);
      return { status: 200, body: { result: 'ok', template: templateView(t) } };
    },
  },
  {
    method: 'GET',
    path: '/template',
    summary: 'List templates',
    tag: 'templates',
    query: (l) => ({
      type: 'object',
      properties: { ...pageParams(l), attr_format: attrFormat, ...filterParams(true) },
      'x-error-order': [...PAGE_ERRORS, ...FILTER_ERRORS],
    }),
    responses: {
      200: { description: 'One page.', schema: 'TemplateList' },
      400: { description: 'Bad paging or filter parameters, checked in this order.', errors: LIST_ERRORS },
    },
    examples: [
      {
        name: 'page',
        summary: 'The first page',
        query: { page_size: 20 },
        status: 200,
        response: { templates: [templateBoth()], pagination: page1 },
      },
      {
        name: 'filtered',
        summary: 'Templates with serial SN-0, attrs only, by label',
        query: { attr: ['serial=SN-0'], attr_format: 'single', sortBy: 'label' },
        status: 200,
        response: { templates: [{ id: T, label: 'Thermometer', created: TIME, attrs: templateAttrs }], pagination: page1 },
      },
      { name: 'pageZero', summary: 'page_num 0', query: { page_num: 0 }, status: 400, response: err('pageNumTooSmall') },
      {
        name: 'notIntegers',
        summary: 'page_size not an integer',
        query: { page_size: 'x' },
        status: 400,
        response: err('pagingNotIntegers'),
      },
      {
        name: 'attrWithoutValue',
        summary: 'attr without =',
        query: { attr: ['serial'] },
        status: 400,
        response: err('attrFilterWithoutValue', 'serial'),
      },
    ],
    async handler(req, { templates }) {
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
    summary: 'Delete every template',
    description: 'Nothing is removed when any device uses any template (404).',
    tag: 'templates',
    responses: {
      200: { description: 'The removed templates (string ids).', schema: 'TemplatesRemoved' },
      404: { description: 'Devices use templates.', errors: ['templatesInUse'] },
    },
    examples: [
      {
        name: 'removed',
        summary: 'No device uses them',
        fixture: 'no-devices',
        status: 200,
        response: { removed: [templateBoth(String(T))], result: 'ok' },
      },
      { name: 'inUse', summary: 'Devices use them', status: 404, response: err('templatesInUse') },
    ],
    async handler(req, { templates }) {
      const removed = await templates.removeAll(req.tenant);
      return { status: 200, body: { removed: removed.map((t) => templateView(t, 'both', true)), result: 'ok' } };
    },
  },
  {
    method: 'GET',
    path: '/template/:id',
    summary: 'Get a template',
    tag: 'templates',
    params: { id: templateIdParam },
    query: () => ({ type: 'object', properties: { attr_format: attrFormat } }),
    responses: {
      200: { description: 'The template (integer id) in the asked attr_format.', schema: 'TemplateInAnyFormat' },
      404: { description: 'No such template.', errors: ['noSuchTemplate'] },
    },
    exampleParams: { id: T },
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
    async handler(req, { templates }) {
      const t = await templates.get(req.tenant, req.params.id!);
      return { status: 200, raw: templateText(t, req.values.attr_format as AttrFormat) };
    },
  },
  {
    method: 'PUT',
    path: '/template/:id',
    summary: 'Replace a template',
    description:
      'Replaces the label and the attribute list. An attribute whose (label, type) is still present keeps its id, overrides and keys; ' +
      'devices based on the template see the change at once. The body is checked before the template is looked up.',
    tag: 'templates',
    params: { id: templateIdParam },
    body,
    responses: {
      200: { description: 'The template (string id).', schema: 'TemplateUpdated' },
      400: { description: 'Invalid body, or devices would get repeated attributes.', errors: [...BODY_ERRORS, 'repeatedAttributes'] },
      404: { description: 'No such template.', errors: ['noSuchTemplate'] },
    },
    exampleParams: { id: T },
    examples: [
      {
        name: 'updated',
        summary: 'A new label, the same attributes',
        body: { ...thermometerBody, label: 'Thermometer v2' },
        status: 200,
        response: { updated: { ...templateBoth(String(T), 'Thermometer v2'), updated: TIME }, result: 'ok' },
      },
      {
        name: 'invalid',
        summary: 'label missing',
        body: { attrs: [] },
        status: 400,
        response: err('validation', { label: ['Missing data for required field.'] }),
      },
      {
        name: 'unknown',
        summary: 'No such template',
        params: { id: 999999 },
        body: thermometerBody,
        status: 404,
        response: err('noSuchTemplate', 999999),
      },
    ],
    async handler(req, { templates }) {
      const t = await templates.update(req.tenant, req.params.id!, req.body);
      return { status: 200, body: { updated: templateView(t, 'both', true), result: 'ok' } };
    },
  },
  {
    method: 'DELETE',
    path: '/template/:id',
    summary: 'Delete a template',
    description: 'Devices based on it are detached from it; their attributes from it (with overrides and keys) disappear.',
    tag: 'templates',
    params: { id: templateIdParam },
    responses: {
      200: { description: 'The removed template (string id).', schema: 'TemplateRemoved' },
      404: { description: 'No such template.', errors: ['noSuchTemplate'] },
    },
    exampleParams: { id: T },
    examples: [
      { name: 'removed', summary: 'Template 1', status: 200, response: { removed: templateBoth(String(T)), result: 'ok' } },
      { name: 'unknown', summary: 'No such template', params: { id: 999999 }, status: 404, response: err('noSuchTemplate', 999999) },
    ],
    async handler(req, { templates }) {
      const t = await templates.remove(req.tenant, req.params.id!);
      return { status: 200, body: { removed: templateView(t, 'both', true), result: 'ok' } };
    },
  },
];
