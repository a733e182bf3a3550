import { beforeAll, describe, expect, it } from 'vitest';
import type { TemplateBody, TemplateList } from '../helpers/api.js';
import { createTemplate } from '../helpers/registry-api.js';
import { http, useService } from '../helpers/service.js';
import { labelsOf } from './fixtures.js';

const svc = useService();
const ids: Record<string, number> = {};

// Labels chosen so that prefix, suffix, sort and filters all have something to tell apart.
const fixtures: TemplateBody[] = [
  {
    label: 'beta-sensor',
    attrs: [
      { label: 'temp', type: 'dynamic', value_type: 'float' },
      { label: 'vendor', type: 'static', value_type: 'string', static_value: 'acme' },
    ],
  },
  { label: 'alpha-sensor', attrs: [{ label: 'vendor', type: 'static', value_type: 'string', static_value: 'initech' }] },
  {
    label: 'sensor-gamma',
    attrs: [
      { label: 'vendor', type: 'static', value_type: 'string', static_value: 'acme' },
      { label: 'k', type: 'static', value_type: 'psk' },
    ],
  },
  { label: 'Zeta', attrs: [{ label: 'proto', type: 'meta', value_type: 'string', static_value: 'a=b' }] },
  { label: 'mid%sensor_x', attrs: [] },
  { label: 'delta', attrs: [{ label: 'temp', type: 'dynamic', value_type: 'integer' }] },
];

beforeAll(async () => {
  for (const f of fixtures) ids[f.label] = (await createTemplate(svc.base, svc.token, f)).id;
});

const list = (query = '') => http<TemplateList>('GET', `${svc.base}/template${query}`, { token: svc.token });
const allLabels = fixtures.map((f) => f.label);

describe('GET /template: order and shape', () => {
  it('default: by id ascending, page 1 of 20, pagination object', async () => {
    const res = await list();
    expect(res.status).toBe(200);
    expect(labelsOf(res.body.templates)).toEqual(allLabels);
    expect(res.body.pagination).toEqual({ page: 1, total: 1, has_next: false, next_page: null });
    expect(typeof res.body.templates[0]!.id).toBe('number');
    expect(Object.keys(res.body.templates[0]!)).toEqual(['id', 'label', 'created', 'attrs', 'data_attrs', 'config_attrs']);
  });

  it('sortBy=label: byte order (uppercase first), ties by id', async () => {
    const res = await list('?sortBy=label');
    expect(labelsOf(res.body.templates)).toEqual([...allLabels].sort());
    expect(labelsOf((await list('?sortBy=other')).body.templates)).toEqual(allLabels);
  });

  it('attr_format on the list', async () => {
    expect(Object.keys((await list('?attr_format=single')).body.templates[0]!)).toEqual(['id', 'label', 'created', 'attrs']);
    expect(Object.keys((await list('?attr_format=split')).body.templates[0]!)).toEqual([
      'id',
      'label',
      'created',
      'data_attrs',
      'config_attrs',
    ]);
  });
});

describe('GET /template: pagination math', () => {
  it('total is the number of pages; has_next and next_page', async () => {
    const p1 = await list('?page_size=4');
    expect(labelsOf(p1.body.templates)).toEqual(allLabels.slice(0, 4));
    expect(p1.body.pagination).toEqual({ page: 1, total: 2, has_next: true, next_page: 2 });
    const p2 = await list('?page_size=4&page_num=2');
    expect(labelsOf(p2.body.templates)).toEqual(allLabels.slice(4));
    expect(p2.body.pagination).toEqual({ page: 2, total: 2, has_next: false, next_page: null });
    expect((await list('?page_size=3&page_num=2')).body.pagination).toEqual({ page: 2, total: 2, has_next: false, next_page: null });
    expect((await list('?page_size=1&page_num=3')).body.pagination).toEqual({ page: 3, total: 6, has_next: true, next_page: 4 });
  });

  it('a page past the end: empty, with the real total', async () => {
    const res = await list('?page_size=4&page_num=9');
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ templates: [], pagination: { page: 9, total: 2, has_next: false, next_page: null } });
    const far = await list('?page_num=9007199254740991');
    expect(far.status).toBe(200);
    expect(far.body).toEqual({ templates: [], pagination: { page: 9007199254740991, total: 1, has_next: false, next_page: null } });
    // Beyond 2^53 a number is not exact: such a page would be echoed as another one.
    const beyond = await list('?page_num=9007199254740993');
    expect(beyond.status).toBe(400);
    expect(beyond.body).toEqual({ message: 'page_size and page_num must be integers', status: 400 });
  });

  it('nothing matches: total 0', async () => {
    expect((await list('?label=nomatch')).body).toEqual({
      templates: [],
      pagination: { page: 1, total: 0, has_next: false, next_page: null },
    });
  });

  const bad: Array<[string, string]> = [
    ['?page_size=abc', 'page_size and page_num must be integers'],
    ['?page_num=1.5', 'page_size and page_num must be integers'],
    ['?page_num=', 'page_size and page_num must be integers'],
    ['?page_num=0&page_size=x', 'page_size and page_num must be integers'],
    ['?page_num=0', 'Page numbers must be greater than 1'],
    ['?page_num=-3&page_size=0', 'Page numbers must be greater than 1'],
    ['?page_size=0', 'At least one entry per page is mandatory'],
    ['?page_size=-1', 'At least one entry per page is mandatory'],
    ['?page_size=1001', 'page_size must be at most 1000'],
    ['?attr=novalue', 'attr filter "novalue" must have the form <label>=<value>'],
  ];
  it.each(bad)('%s: 400 %s', async (query, message) => {
    const res = await list(query);
    expect(res.status).toBe(400);
    expect(res.body).toEqual({ message, status: 400 });
  });
});

describe('GET /template: filters', () => {
  it('label: prefix or suffix, case-sensitive, literal', async () => {
    expect(labelsOf((await list('?label=sensor')).body.templates)).toEqual(['beta-sensor', 'alpha-sensor', 'sensor-gamma']);
    expect(labelsOf((await list('?label=alpha')).body.templates)).toEqual(['alpha-sensor']);
    expect(labelsOf((await list('?label=gamma')).body.templates)).toEqual(['sensor-gamma']);
    expect(labelsOf((await list('?label=zeta')).body.templates)).toEqual([]);
    expect(labelsOf((await list('?label=ens')).body.templates)).toEqual([]); // neither prefix nor suffix
    expect(labelsOf((await list(`?label=${encodeURIComponent('mid%')}`)).body.templates)).toEqual(['mid%sensor_x']);
    expect(labelsOf((await list('?label=_x')).body.templates)).toEqual(['mid%sensor_x']);
    expect(labelsOf((await list('?label=%25')).body.templates)).toEqual([]); // % is not a wildcard
  });

  it('attr=<label>=<value>: split at the first =', async () => {
    expect(labelsOf((await list('?attr=vendor=acme')).body.templates)).toEqual(['beta-sensor', 'sensor-gamma']);
    expect(labelsOf((await list('?attr=proto=a=b')).body.templates)).toEqual(['Zeta']);
    expect(labelsOf((await list('?attr=vendor=ACME')).body.templates)).toEqual([]);
  });

  it('several attr filters must all hold', async () => {
    expect(labelsOf((await list('?attr=vendor=acme&attr=k=x')).body.templates)).toEqual([]);
    await createTemplate(svc.base, svc.token, {
      label: 'two-values',
      attrs: [
        { label: 'vendor', type: 'static', value_type: 'string', static_value: 'acme' },
        { label: 'model', type: 'static', value_type: 'string', static_value: 'm1' },
      ],
    });
    expect(labelsOf((await list('?attr=vendor=acme&attr=model=m1')).body.templates)).toEqual(['two-values']);
    await http('DELETE', `${svc.base}/template/${(await list('?label=two-values')).body.templates[0]!.id}`, { token: svc.token });
  });

  it('attr_type matches type or value_type; several must all hold', async () => {
    expect(labelsOf((await list('?attr_type=dynamic')).body.templates)).toEqual(['beta-sensor', 'delta']);
    expect(labelsOf((await list('?attr_type=psk')).body.templates)).toEqual(['sensor-gamma']);
    expect(labelsOf((await list('?attr_type=meta')).body.templates)).toEqual(['Zeta']);
    expect(labelsOf((await list('?attr_type=dynamic&attr_type=string')).body.templates)).toEqual(['beta-sensor']);
    expect(labelsOf((await list('?attr_type=float&attr_type=integer')).body.templates)).toEqual([]);
    // an empty value asks for a type equal to "": no attribute has one (types are never empty)
    expect((await list('?attr_type=')).body).toEqual({
      templates: [],
      pagination: { page: 1, total: 0, has_next: false, next_page: null },
    });
    expect(labelsOf((await list('?attr_type=&attr_type=dynamic')).body.templates)).toEqual([]);
  });

  it('filters combine with each other, with sortBy and with pagination (pages count templates)', async () => {
    const q = '?label=sensor&attr=vendor=acme&attr_type=static&sortBy=label';
    expect(labelsOf((await list(q)).body.templates)).toEqual(['beta-sensor', 'sensor-gamma']);
    // beta-sensor has two attributes matching attr_type=static|string: still one template
    const p = await list('?attr_type=string&page_size=1');
    expect(p.body.pagination.total).toBe(4);
    expect(labelsOf((await list('?attr_type=string&page_size=2&page_num=2')).body.templates)).toEqual(['sensor-gamma', 'Zeta']);
    expect(labelsOf((await list('?label=sensor&attr_type=dynamic')).body.templates)).toEqual(['beta-sensor']);
  });
});

describe('GET /template: odd input is never a 500', () => {
  it.each(['?label=%00', '?attr=a%00=b', '?attr=a=%00', '?attr_type=%00', '?label=%E2%82%AC', "?label='", '?label=%5C'])(
    '%s: an empty page',
    async (query) => {
      const res = await list(query);
      expect(res.status).toBe(200);
      expect(res.body).toEqual({ templates: [], pagination: { page: 1, total: 0, has_next: false, next_page: null } });
    },
  );
});
