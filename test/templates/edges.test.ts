// Template rules at the edges (interface.md §2.1, §2.2, §4.1, §7; decisions.md "Common" and
// "Templates"; docs/registry.md): label sort ties, attr_format on the list, Content-Type on PUT,
// PUT and POST validation, metadata errors, the data/config split, odd ids on PUT and DELETE,
// timestamps and optional fields. Every describe block works in a tenant of its own, and every
// bad request is checked to change nothing.
import crypto from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { http, login, startTestService, tenantToken, type ApiResponse, type TestService } from '../helpers/service.js';
import { createTemplate, labelsOf, sensorBody, TS } from './fixtures.js';

let svc: TestService;
let admin: string;

beforeAll(async () => {
  svc = await startTestService();
  admin = await login(svc.base);
});
afterAll(() => svc?.stop());

const JSON_MESSAGE = 'Payload must be valid JSON, and Content-Type set accordingly';

/** A user of a tenant nobody else uses, with helpers bound to it. */
async function freshTenant(prefix: string) {
  const tenant = `${prefix}-${crypto.randomBytes(3).toString('hex')}`;
  const token = await tenantToken(svc.base, admin, tenant);
  return {
    tenant,
    token,
    create: (body: unknown = sensorBody()) => createTemplate(svc.base, token, body),
    post: (body: unknown, headers?: Record<string, string>) => http('POST', `${svc.base}/template`, { token, body, headers }),
    put: (id: string | number, body: unknown, headers?: Record<string, string>) => http('PUT', `${svc.base}/template/${id}`, { token, body, headers }),
    get: (id: string | number) => http('GET', `${svc.base}/template/${id}`, { token }),
    list: (query = '') => http('GET', `${svc.base}/template${query}`, { token }),
    del: (id: string | number) => http('DELETE', `${svc.base}/template/${id}`, { token }),
    delAll: () => http('DELETE', `${svc.base}/template`, { token }),
    /** Templates of this tenant, counted in the database. */
    count: async () => (await svc.service.pool.query('SELECT count(*)::int AS n FROM templates WHERE tenant = $1', [tenant])).rows[0].n as number,
    /** Attribute rows (metadata included) of this tenant. */
    attrCount: async () => (await svc.service.pool.query('SELECT count(*)::int AS n FROM template_attrs WHERE tenant = $1', [tenant])).rows[0].n as number,
  };
}
type Tenant = Awaited<ReturnType<typeof freshTenant>>;

/**
 * Sends a request that must be refused with `status` and `expected`, and checks that it changed
 * nothing: the tenant's template and attribute rows, and `unchanged` (a template) as GET shows it.
 */
async function expectRefused(u: Tenant, send: () => Promise<ApiResponse>, status: number, expected: unknown, unchanged?: { id: number }, what = '') {
  const [before, attrsBefore] = [await u.count(), await u.attrCount()];
  const res = await send();
  expect(res.status, `${what} ${res.text}`).toBe(status);
  expect(res.body, what).toEqual(expected);
  expect(await u.count()).toBe(before);
  expect(await u.attrCount()).toBe(attrsBefore);
  if (unchanged) expect((await u.get(unchanged.id)).body).toEqual(unchanged);
}

/** `t` with its id as a string, as PUT and both DELETE routes answer it. */
const asStringId = (t: any) => ({ ...t, id: String(t.id) });

/** A timestamp of the contract's form that is also "now" in UTC (not local time labelled +00:00). */
function expectRecentUtc(ts: string, since: number) {
  expect(ts).toMatch(TS);
  const ms = Date.parse(ts);
  expect(ms).toBeGreaterThanOrEqual(since - 5_000);
  expect(ms).toBeLessThanOrEqual(Date.now() + 5_000);
}

// ---------------------------------------------------------------------------------------------
describe('GET /template?sortBy=label: equal labels are ordered by id ascending', () => {
  let u: Tenant;
  const ids: Record<string, number> = {};

  beforeAll(async () => {
    u = await freshTenant('edges-sort');
    // Created in this order (ids ascending): zz, same, a, same, b, same. Then "zz" (the lowest
    // id, but the most recently changed) is renamed to "same": created/updated order and id
    // order of the "same" group then differ.
    ids.zz = (await u.create({ label: 'zz' })).id;
    ids.same1 = (await u.create({ label: 'same' })).id;
    ids.a = (await u.create({ label: 'a' })).id;
    ids.same2 = (await u.create({ label: 'same' })).id;
    ids.b = (await u.create({ label: 'b' })).id;
    ids.same3 = (await u.create({ label: 'same' })).id;
    const renamed = await u.put(ids.zz!, { label: 'same' });
    expect(renamed.status, renamed.text).toBe(200);
  });

  it('label ascending, ties by id', async () => {
    const res = await u.list('?sortBy=label');
    expect(res.status).toBe(200);
    expect(res.body.templates.map((t: any) => [t.label, t.id])).toEqual([
      ['a', ids.a],
      ['b', ids.b],
      ['same', ids.zz],
      ['same', ids.same1],
      ['same', ids.same2],
      ['same', ids.same3],
    ]);
  });

  it('pages cut through the ties without repeating or losing a template', async () => {
    const seen: number[] = [];
    for (let page = 1; page <= 6; page++) {
      const res = await u.list(`?sortBy=label&page_size=1&page_num=${page}`);
      expect(res.status).toBe(200);
      expect(res.body.pagination).toEqual({ page, total: 6, has_next: page < 6, next_page: page < 6 ? page + 1 : null });
      seen.push(...res.body.templates.map((t: any) => t.id));
    }
    expect(seen).toEqual([ids.a, ids.b, ids.zz, ids.same1, ids.same2, ids.same3]);
    const p2 = await u.list('?sortBy=label&page_size=4&page_num=2');
    expect(p2.body.templates.map((t: any) => t.id)).toEqual([ids.same2, ids.same3]);
  });

  it('with a label filter, only the ties, still by id', async () => {
    const res = await u.list('?sortBy=label&label=same');
    expect(res.body.templates.map((t: any) => t.id)).toEqual([ids.zz, ids.same1, ids.same2, ids.same3]);
  });

  it('without sortBy: by id, whatever the labels', async () => {
    const res = await u.list();
    expect(res.body.templates.map((t: any) => t.id)).toEqual([ids.zz, ids.same1, ids.a, ids.same2, ids.b, ids.same3]);
  });
});

// ---------------------------------------------------------------------------------------------
describe('GET /template?attr_format=<unknown>: means both', () => {
  let u: Tenant;

  beforeAll(async () => {
    u = await freshTenant('edges-format');
    await u.create();
    await u.create({ label: 'other', attrs: [{ label: 'p', type: 'mqtt_meta', value_type: 'string', static_value: 'x' }] });
  });

  it.each(['weird', 'BOTH', 'Single', 'splitt', ''])('attr_format=%s: all three lists, the same page as without it', async (format) => {
    const plain = await u.list();
    expect(plain.status).toBe(200);
    expect(plain.body.templates).toHaveLength(2);
    const res = await u.list(`?attr_format=${format}`);
    expect(res.status).toBe(200);
    for (const t of res.body.templates) expect(Object.keys(t)).toEqual(['id', 'label', 'created', 'attrs', 'data_attrs', 'config_attrs']);
    expect(res.body).toEqual(plain.body);
  });

  it('the known values still differ from it (the check above can fail)', async () => {
    const single = await u.list('?attr_format=single');
    expect(Object.keys(single.body.templates[0])).toEqual(['id', 'label', 'created', 'attrs']);
    const split = await u.list('?attr_format=split');
    expect(Object.keys(split.body.templates[1])).toEqual(['id', 'label', 'created', 'data_attrs', 'config_attrs']);
    const both = await u.list('?attr_format=both');
    expect(both.body).toEqual((await u.list()).body);
  });
});

// ---------------------------------------------------------------------------------------------
describe('Content-Type on POST and PUT /template', () => {
  let u: Tenant;
  beforeAll(async () => {
    u = await freshTenant('edges-ctype');
  });

  it('POST accepts application/json; charset=utf-8', async () => {
    const before = await u.count();
    const res = await u.post({ label: 'charset', attrs: [{ label: 'température', type: 'dynamic', value_type: 'float' }] }, { 'content-type': 'application/json; charset=utf-8' });
    // The attribute label is outside the label alphabet: the body was read and validated.
    expect(res.status).toBe(400);
    expect(res.body).toEqual({ message: 'failed to parse attr', errors: { label: ['Labels must contain letters, numbers or dashes(-_)'] } });
    const ok = await u.post({ label: 'Charset ✓', attrs: [{ label: 'temp', type: 'dynamic', value_type: 'float' }] }, { 'content-type': 'application/json; charset=utf-8' });
    expect(ok.status, ok.text).toBe(200);
    expect(ok.body.result).toBe('ok');
    expect(ok.body.template.label).toBe('Charset ✓');
    expect(labelsOf(ok.body.template.attrs)).toEqual(['temp']);
    expect(await u.count()).toBe(before + 1);
    expect((await u.get(ok.body.template.id)).body).toEqual(ok.body.template);
  });

  it('PUT accepts application/json; charset=utf-8', async () => {
    const t = await u.create();
    const res = await u.put(t.id, { label: 'Renamed ✓', attrs: [{ label: 'temperature', type: 'dynamic', value_type: 'float' }] }, { 'content-type': 'application/json; charset=utf-8' });
    expect(res.status, res.text).toBe(200);
    expect(res.body.result).toBe('ok');
    expect(res.body.updated.id).toBe(String(t.id));
    expect(res.body.updated.label).toBe('Renamed ✓');
    expect(labelsOf(res.body.updated.attrs)).toEqual(['temperature']);
    expect((await u.get(t.id)).body.label).toBe('Renamed ✓');
  });

  const bad: Array<[string, { rawBody: string | Buffer; headers: Record<string, string> }]> = [
    ['text/plain with a JSON body', { rawBody: JSON.stringify({ label: 'changed' }), headers: { 'content-type': 'text/plain' } }],
    ['text/plain; charset=utf-8 with a JSON body', { rawBody: JSON.stringify({ label: 'changed' }), headers: { 'content-type': 'text/plain; charset=utf-8' } }],
    ['no Content-Type with a JSON body', { rawBody: Buffer.from(JSON.stringify({ label: 'changed' })), headers: {} }],
    ['application/json with a truncated body', { rawBody: '{"label": "changed"', headers: { 'content-type': 'application/json' } }],
    ['application/json with a body that is not JSON', { rawBody: 'label=changed', headers: { 'content-type': 'application/json' } }],
    ['application/json; charset=utf-8 with an empty body', { rawBody: '', headers: { 'content-type': 'application/json; charset=utf-8' } }],
  ];
  it.each(bad)('PUT %s: 400 and the template is unchanged', async (_name, opts) => {
    const t = await u.create();
    await expectRefused(u, () => http('PUT', `${svc.base}/template/${t.id}`, { token: u.token, ...opts }), 400, { message: JSON_MESSAGE, status: 400 }, t);
  });

  it('POST text/plain with a JSON body: 400, nothing created', async () => {
    const before = await u.count();
    const res = await http('POST', `${svc.base}/template`, { token: u.token, rawBody: JSON.stringify(sensorBody()), headers: { 'content-type': 'text/plain' } });
    expect(res.status).toBe(400);
    expect(res.body).toEqual({ message: JSON_MESSAGE, status: 400 });
    expect(await u.count()).toBe(before);
  });
});

// ---------------------------------------------------------------------------------------------
describe('PUT /template/{id}: validation leaves the template unchanged', () => {
  let u: Tenant;
  beforeAll(async () => {
    u = await freshTenant('edges-put');
  });

  it('attrs absent: 200, the template then has no attributes', async () => {
    const t = await u.create();
    const before = await u.count();
    const res = await u.put(t.id, { label: 'bare' });
    expect(res.status, res.text).toBe(200);
    expect(res.body).toEqual({
      result: 'ok',
      updated: { id: String(t.id), label: 'bare', created: t.created, updated: res.body.updated.updated, attrs: [], data_attrs: [], config_attrs: [] },
    });
    expect(res.body.updated.updated).toMatch(TS);
    expect((await u.get(t.id)).body).toEqual({ ...res.body.updated, id: t.id });
    expect(await u.count()).toBe(before);
    expect(await countOf(svc.service.pool, 'SELECT count(*)::int AS n FROM template_attrs WHERE tenant = $1 AND template_id = $2', [u.tenant, t.id])).toBe(0);
  });

  const attr = (over: Record<string, unknown>) => ({ label: 'x', type: 'dynamic', value_type: 'float', ...over });
  const cases: Array<[string, unknown, unknown]> = [
    [
      'duplicate attribute labels',
      { label: 'dup', attrs: [attr({}), attr({ type: 'static', value_type: 'string', static_value: 'v' })] },
      { message: 'failed to parse attr', errors: { label: ['Repeated attribute label: x'] } },
    ],
    [
      'duplicate labels after valid ones',
      { label: 'dup', attrs: [attr({ label: 'a' }), attr({ label: 'b' }), attr({ label: 'a', type: 'actuator' })] },
      { message: 'failed to parse attr', errors: { label: ['Repeated attribute label: a'] } },
    ],
    [
      'a static attribute without static_value',
      { label: 's', attrs: [attr({ type: 'static', value_type: 'string' })] },
      { message: 'failed to parse attr', errors: { static_value: ['Missing data for required field.'] } },
    ],
    ['template label a number', { label: 5, attrs: [] }, { message: 'failed to parse input', errors: { label: ['Not a valid string.'] } }],
    ['template label missing', { attrs: [attr({})] }, { message: 'failed to parse input', errors: { label: ['Missing data for required field.'] } }],
    ['attrs an object', { label: 'o', attrs: { x: attr({}) } }, { message: 'failed to parse input', errors: { attrs: ['Not a valid list.'] } }],
    ['attrs null', { label: 'o', attrs: null }, { message: 'failed to parse input', errors: { attrs: ['Field may not be null.'] } }],
    ['attribute label a number', { label: 'n', attrs: [attr({ label: 7 })] }, { message: 'failed to parse attr', errors: { label: ['Not a valid string.'] } }],
    ['attribute type a number', { label: 'n', attrs: [attr({ type: 1 })] }, { message: 'failed to parse attr', errors: { type: ['Not a valid string.'] } }],
    ['attribute value_type a boolean', { label: 'n', attrs: [attr({ value_type: true })] }, { message: 'failed to parse attr', errors: { value_type: ['Not a valid string.'] } }],
    ['template label of 129 characters', { label: 'L'.repeat(129) }, { message: 'failed to parse input', errors: { label: ['Longer than maximum length 128.'] } }],
    [
      'attribute label of 129 characters',
      { label: 'l', attrs: [attr({ label: 'a'.repeat(129) })] },
      { message: 'failed to parse attr', errors: { label: ['Longer than maximum length 128.'] } },
    ],
    ['type of 33 characters', { label: 'l', attrs: [attr({ type: 't'.repeat(33) })] }, { message: 'failed to parse attr', errors: { type: ['Longer than maximum length 32.'] } }],
    [
      'value_type of 33 characters',
      { label: 'l', attrs: [attr({ value_type: 'v'.repeat(33) })] },
      { message: 'failed to parse attr', errors: { value_type: ['Longer than maximum length 32.'] } },
    ],
    [
      'static_value of 129 characters',
      { label: 'l', attrs: [attr({ type: 'static', value_type: 'string', static_value: 's'.repeat(129) })] },
      { message: 'failed to parse attr', errors: { static_value: ['Longer than maximum length 128.'] } },
    ],
    [
      'static_value an array',
      { label: 'l', attrs: [attr({ type: 'static', value_type: 'string', static_value: ['a', 'b'] })] },
      { message: 'failed to parse attr', errors: { static_value: ['Not a valid string.'] } },
    ],
    [
      'a bad attribute after a good one (one attribute\'s errors only)',
      { label: 'l', attrs: [attr({ label: 'good' }), attr({ label: 'bad', type: 'static', value_type: 'string', static_value: ['a'] })] },
      { message: 'failed to parse attr', errors: { static_value: ['Not a valid string.'] } },
    ],
  ];

  it.each(cases)('%s: 400 and nothing changes', async (_name, body, expected) => {
    const t = await u.create();
    await expectRefused(u, () => u.put(t.id, body), 400, expected, t);
  });

  it('the limits themselves are accepted on PUT (128 / 32 / 128)', async () => {
    const t = await u.create();
    const res = await u.put(t.id, {
      label: 'L'.repeat(128),
      attrs: [{ label: 'a'.repeat(128), type: 't'.repeat(32), value_type: 'v'.repeat(32), static_value: 's'.repeat(128) }],
    });
    expect(res.status, res.text).toBe(200);
    expect(res.body.updated.attrs[0]).toMatchObject({ label: 'a'.repeat(128), type: 't'.repeat(32), value_type: 'v'.repeat(32), static_value: 's'.repeat(128) });
  });
});

// ---------------------------------------------------------------------------------------------
describe('POST /template: field types and lengths', () => {
  let u: Tenant;
  beforeAll(async () => {
    u = await freshTenant('edges-post');
  });

  const attr = (over: Record<string, unknown>) => ({ label: 'x', type: 'dynamic', value_type: 'float', ...over });
  const cases: Array<[string, unknown, unknown]> = [
    ['type a number', { label: 'p', attrs: [attr({ type: 3 })] }, { message: 'failed to parse attr', errors: { type: ['Not a valid string.'] } }],
    ['type an object', { label: 'p', attrs: [attr({ type: { t: 'dynamic' } })] }, { message: 'failed to parse attr', errors: { type: ['Not a valid string.'] } }],
    ['value_type a number', { label: 'p', attrs: [attr({ value_type: 1.5 })] }, { message: 'failed to parse attr', errors: { value_type: ['Not a valid string.'] } }],
    ['value_type a list', { label: 'p', attrs: [attr({ value_type: ['float'] })] }, { message: 'failed to parse attr', errors: { value_type: ['Not a valid string.'] } }],
    [
      'value_type of 33 characters',
      { label: 'p', attrs: [attr({ value_type: 'v'.repeat(33) })] },
      { message: 'failed to parse attr', errors: { value_type: ['Longer than maximum length 32.'] } },
    ],
    [
      'static_value an array',
      { label: 'p', attrs: [attr({ type: 'static', value_type: 'string', static_value: [1, 2] })] },
      { message: 'failed to parse attr', errors: { static_value: ['Not a valid string.'] } },
    ],
    [
      'static_value an empty array',
      { label: 'p', attrs: [attr({ type: 'static', value_type: 'string', static_value: [] })] },
      { message: 'failed to parse attr', errors: { static_value: ['Not a valid string.'] } },
    ],
    [
      'static_value an array on a dynamic attribute',
      { label: 'p', attrs: [attr({ static_value: ['a'] })] },
      { message: 'failed to parse attr', errors: { static_value: ['Not a valid string.'] } },
    ],
  ];

  it.each(cases)('%s: 400, nothing created', async (_name, body, expected) => {
    await expectRefused(u, () => u.post(body), 400, expected);
  });

  it('value_type of exactly 32 characters is accepted', async () => {
    const before = await u.count();
    const res = await u.post({ label: 'p', attrs: [attr({ value_type: 'v'.repeat(32) })] });
    expect(res.status, res.text).toBe(200);
    expect(res.body.template.attrs[0].value_type).toBe('v'.repeat(32));
    expect(await u.count()).toBe(before + 1);
  });
});

// ---------------------------------------------------------------------------------------------
describe('metadata errors (POST and PUT)', () => {
  let u: Tenant;
  beforeAll(async () => {
    u = await freshTenant('edges-meta');
  });

  const withMeta = (metadata: unknown) => ({ label: 'm', attrs: [{ label: 'proto', type: 'meta', value_type: 'string', static_value: 'mqtt', metadata }] });
  const unit = (over: Record<string, unknown> = {}) => ({ label: 'unit', type: 'static', value_type: 'string', static_value: 'c', ...over });
  const cases: Array<[string, unknown, unknown]> = [
    ['metadata null', withMeta(null), { message: 'failed to parse attr', errors: { metadata: ['Field may not be null.'] } }],
    ['metadata an object', withMeta(unit()), { message: 'failed to parse attr', errors: { metadata: ['Not a valid list.'] } }],
    ['metadata a string', withMeta('unit'), { message: 'failed to parse attr', errors: { metadata: ['Not a valid list.'] } }],
    [
      'repeated metadata labels within one attribute',
      withMeta([unit(), unit({ type: 'meta', static_value: 'f' })]),
      { message: 'failed to parse attr', errors: { metadata: ['Repeated metadata label: unit'] } },
    ],
  ];

  it.each(cases)('POST, %s: 400, nothing created', async (_name, body, expected) => {
    await expectRefused(u, () => u.post(body), 400, expected);
  });

  it.each(cases)('PUT, %s: 400, template unchanged', async (_name, body, expected) => {
    const t = await u.create();
    await expectRefused(u, () => u.put(t.id, body), 400, expected, t);
  });

  it('the same metadata label under two different attributes is fine', async () => {
    const res = await u.post({
      label: 'two',
      attrs: [
        { label: 'a', type: 'dynamic', value_type: 'float', metadata: [unit()] },
        { label: 'b', type: 'dynamic', value_type: 'float', metadata: [unit()] },
      ],
    });
    expect(res.status, res.text).toBe(200);
    expect(res.body.template.attrs.map((a: any) => labelsOf(a.metadata))).toEqual([['unit'], ['unit']]);
  });
});

// ---------------------------------------------------------------------------------------------
describe('attribute types: data_attrs, config_attrs and attrs', () => {
  let u: Tenant;
  beforeAll(async () => {
    u = await freshTenant('edges-types');
  });

  const body = {
    label: 'kinds',
    attrs: [
      { label: 'odd', type: 'foo', value_type: 'string' },
      { label: 'dyn', type: 'dynamic', value_type: 'float' },
      { label: 'mm', type: 'mqtt_meta', value_type: 'string', static_value: 'qos1' },
      { label: 'st', type: 'static', value_type: 'string', static_value: 'v' },
      { label: 'act', type: 'actuator', value_type: 'bool' },
      { label: 'me', type: 'meta', value_type: 'string', static_value: 'm' },
    ],
  };
  const ids = (list: any[]) => list.map((a) => a.id);
  const ascending = (list: number[]) => [...list].sort((a, b) => a - b);

  function expectSplit(t: any, data: string[], config: string[], all: string[]) {
    expect(labelsOf(t.data_attrs)).toEqual(data);
    expect(labelsOf(t.config_attrs)).toEqual(config);
    expect(labelsOf(t.attrs)).toEqual(all);
    expect(ids(t.attrs)).toEqual(ascending(ids(t.attrs)));
    // attrs holds every attribute listed in both, as the same objects
    expect([...t.data_attrs, ...t.config_attrs].sort((a: any, b: any) => a.id - b.id)).toEqual(t.attrs);
  }

  it('unknown and mqtt_meta types go to config_attrs; dynamic, static, actuator to data_attrs', async () => {
    const t = await u.create(body);
    expectSplit(t, ['dyn', 'st', 'act'], ['odd', 'mm', 'me'], ['odd', 'dyn', 'mm', 'st', 'act', 'me']);
    expect(t.attrs[0]).toMatchObject({ type: 'foo', value_type: 'string' });
    expectSplit((await u.get(t.id)).body, ['dyn', 'st', 'act'], ['odd', 'mm', 'me'], ['odd', 'dyn', 'mm', 'st', 'act', 'me']);
    const listed = (await u.list()).body.templates.find((x: any) => x.id === t.id);
    expectSplit(listed, ['dyn', 'st', 'act'], ['odd', 'mm', 'me'], ['odd', 'dyn', 'mm', 'st', 'act', 'me']);
  });

  it('after a PUT, attrs is ordered by attribute id, not by the order of the body', async () => {
    const t = await u.create(body);
    const old = Object.fromEntries(t.attrs.map((a: any) => [a.label, a.id]));
    const res = await u.put(t.id, {
      label: 'kinds',
      attrs: [
        { label: 'new-dyn', type: 'dynamic', value_type: 'float' }, // new: highest id
        { label: 'act', type: 'actuator', value_type: 'bool' }, // kept
        { label: 'new-foo', type: 'foo', value_type: 'x' }, // new
        { label: 'odd', type: 'foo', value_type: 'string' }, // kept: lowest id
        { label: 'mm', type: 'dynamic', value_type: 'string' }, // type changed: a new attribute, now data
      ],
    });
    expect(res.status, res.text).toBe(200);
    const up = res.body.updated;
    expectSplit(up, ['act', 'new-dyn', 'mm'], ['odd', 'new-foo'], ['odd', 'act', 'new-dyn', 'new-foo', 'mm']);
    expect(up.attrs[0].id).toBe(old.odd);
    expect(up.attrs[1].id).toBe(old.act);
    expect(up.attrs.find((a: any) => a.label === 'mm').id).not.toBe(old.mm);
    expectSplit((await u.get(t.id)).body, ['act', 'new-dyn', 'mm'], ['odd', 'new-foo'], ['odd', 'act', 'new-dyn', 'new-foo', 'mm']);
  });

  it('attr_format=split and single keep the same split and order', async () => {
    const t = await u.create(body);
    const split = (await http('GET', `${svc.base}/template/${t.id}?attr_format=split`, { token: u.token })).body;
    expect(labelsOf(split.data_attrs)).toEqual(['dyn', 'st', 'act']);
    expect(labelsOf(split.config_attrs)).toEqual(['odd', 'mm', 'me']);
    const single = (await http('GET', `${svc.base}/template/${t.id}?attr_format=single`, { token: u.token })).body;
    expect(labelsOf(single.attrs)).toEqual(['odd', 'dyn', 'mm', 'st', 'act', 'me']);
  });
});

// ---------------------------------------------------------------------------------------------
describe('odd ids on PUT and DELETE /template/{id}: 404, never 500, nothing changed', () => {
  let u: Tenant;
  let t: any;
  beforeAll(async () => {
    u = await freshTenant('edges-ids');
    t = await u.create();
  });

  // [path segment, the id as the message names it (the segment, percent-decoded)]
  const odd = (): Array<[string, string]> => [
    ['99999999999999999999', '99999999999999999999'],
    ['1.5', '1.5'],
    ['%20', ' '],
    ['abc', 'abc'],
    ['0', '0'],
    ['-1', '-1'],
    [`${t.id}.5`, `${t.id}.5`],
    [`-${t.id}`, `-${t.id}`],
    [`${t.id}abc`, `${t.id}abc`],
    [`${t.id}%20`, `${t.id} `],
    [`${t.id}e0`, `${t.id}e0`],
  ];

  it('PUT: 404 No such template: <id>', async () => {
    for (const [segment, shown] of odd()) {
      await expectRefused(u, () => u.put(segment, { label: 'changed', attrs: [] }), 404, { message: `No such template: ${shown}`, status: 404 }, t, `PUT ${segment}`);
    }
  });

  it('PUT with a bad body to an odd id: the body is checked first (400)', async () => {
    for (const [segment] of odd()) {
      const res = await u.put(segment, { attrs: [] });
      expect(res.status, `PUT ${segment}`).toBe(400);
      expect(res.body).toEqual({ message: 'failed to parse input', errors: { label: ['Missing data for required field.'] } });
    }
  });

  it('DELETE: 404 No such template: <id>', async () => {
    for (const [segment, shown] of odd()) {
      await expectRefused(u, () => u.del(segment), 404, { message: `No such template: ${shown}`, status: 404 }, t, `DELETE ${segment}`);
    }
  });

  it('the real id still answers (the 404s above are not for every id)', async () => {
    const res = await u.del(t.id);
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ removed: asStringId(t), result: 'ok' });
  });
});

// ---------------------------------------------------------------------------------------------
describe('timestamps, optional fields and id types in list, PUT and DELETE answers', () => {
  let u: Tenant;
  let since: number;
  let plain: any; // never updated
  let changed: any; // updated by PUT
  let putAnswer: any;

  beforeAll(async () => {
    u = await freshTenant('edges-ts');
    since = Date.now();
    plain = await u.create({
      label: 'plain',
      attrs: [
        { label: 'temp', type: 'dynamic', value_type: 'float' },
        { label: 'key', type: 'static', value_type: 'psk' },
        {
          label: 'proto',
          type: 'meta',
          value_type: 'string',
          static_value: 'mqtt',
          metadata: [{ label: 'unit', type: 'static', value_type: 'string', static_value: 'none' }],
        },
      ],
    });
    changed = await u.create();
    const body = sensorBody();
    body.attrs[1]!.static_value = 'T-2000'; // model: kept, value changed → updated
    const res = await u.put(changed.id, body);
    expect(res.status, res.text).toBe(200);
    putAnswer = res.body;
  });

  /** Checks one attribute (or metadata entry) view: fields present only when set. */
  function expectAttrView(a: any, templateId: string | null, fields: string[]) {
    expect(Object.keys(a).sort()).toEqual([...fields].sort());
    expect(typeof a.id).toBe('number');
    expectRecentUtc(a.created, since);
    if (templateId !== null) expect(a.template_id).toBe(templateId);
    if ('updated' in a) expectRecentUtc(a.updated, since);
  }

  const BASE = ['id', 'label', 'type', 'value_type', 'template_id', 'created'];

  function expectPlain(t: any, idType: 'number' | 'string') {
    expect(typeof t.id).toBe(idType);
    expect(Object.keys(t)).toEqual(['id', 'label', 'created', 'attrs', 'data_attrs', 'config_attrs']);
    expectRecentUtc(t.created, since);
    const [temp, key, proto] = t.attrs;
    expectAttrView(temp, String(plain.id), BASE);
    expectAttrView(key, String(plain.id), BASE); // psk without a value: no static_value
    expectAttrView(proto, String(plain.id), [...BASE, 'static_value', 'metadata']);
    expectAttrView(proto.metadata[0], null, ['id', 'label', 'type', 'value_type', 'static_value', 'created']);
  }

  function expectChanged(t: any, idType: 'number' | 'string') {
    expect(typeof t.id).toBe(idType);
    expect(Object.keys(t)).toEqual(['id', 'label', 'created', 'updated', 'attrs', 'data_attrs', 'config_attrs']);
    expect(t.created).toBe(changed.created);
    expectRecentUtc(t.updated, since);
    expect(Date.parse(t.updated)).toBeGreaterThanOrEqual(Date.parse(t.created));
    const byLabel = Object.fromEntries(t.attrs.map((a: any) => [a.label, a]));
    expectAttrView(byLabel.temperature, String(changed.id), BASE);
    expectAttrView(byLabel.model, String(changed.id), [...BASE, 'static_value', 'updated']);
    expectAttrView(byLabel.led, String(changed.id), BASE);
    expectAttrView(byLabel.protocol, String(changed.id), [...BASE, 'static_value', 'metadata']);
    expect(byLabel.model.static_value).toBe('T-2000');
  }

  it('create answers have no updated field; PUT adds it, with a string id', () => {
    expect(plain).not.toHaveProperty('updated');
    expect(changed).not.toHaveProperty('updated');
    expectPlain(plain, 'number');
    expect(Object.keys(putAnswer)).toEqual(['updated', 'result']);
    expect(putAnswer.result).toBe('ok');
    expectChanged(putAnswer.updated, 'string');
    expect(putAnswer.updated.id).toBe(String(changed.id));
  });

  it('list items: integer ids, created always, updated only once set', async () => {
    const res = await u.list();
    expect(res.status).toBe(200);
    const [p, c] = res.body.templates;
    expectPlain(p, 'number');
    expectChanged(c, 'number');
    expect(c).toEqual({ ...putAnswer.updated, id: changed.id });
    expect(p).toEqual(plain);
  });

  it('DELETE /template/{id}: removed has a string id, the same timestamps and fields', async () => {
    const listed = (await u.list()).body.templates;
    const res = await u.del(changed.id);
    expect(res.status).toBe(200);
    expect(Object.keys(res.body).sort()).toEqual(['removed', 'result']);
    expect(res.body.result).toBe('ok');
    expectChanged(res.body.removed, 'string');
    expect(res.body.removed).toEqual(asStringId(listed[1]));
    // and it is gone
    expect((await u.get(changed.id)).status).toBe(404);
    expect(await u.count()).toBe(1);
  });

  it('DELETE /template: every removed item has a string id; updated only where set', async () => {
    const again = await u.create(sensorBody());
    const res2 = await u.put(again.id, { ...sensorBody(), label: 'again' });
    expect(res2.status).toBe(200);
    const listed = (await u.list()).body.templates;
    expect(listed.map((t: any) => t.id)).toEqual([plain.id, again.id]);
    const res = await u.delAll();
    expect(res.status).toBe(200);
    expect(Object.keys(res.body).sort()).toEqual(['removed', 'result']);
    expect(res.body.result).toBe('ok');
    const [p, a] = res.body.removed;
    expect(res.body.removed).toHaveLength(2);
    expectPlain(p, 'string');
    expect(a).toMatchObject({ id: String(again.id), label: 'again' });
    expect(Object.keys(a)).toEqual(['id', 'label', 'created', 'updated', 'attrs', 'data_attrs', 'config_attrs']);
    expectRecentUtc(a.updated, since);
    // an unchanged PUT of an attribute sets no attribute updated time
    for (const attr of a.attrs) expect(attr).not.toHaveProperty('updated');
    expect(res.body.removed).toEqual(listed.map(asStringId));
    expect(await u.count()).toBe(0);
    expect((await u.list()).body).toEqual({ templates: [], pagination: { page: 1, total: 0, has_next: false, next_page: null } });
  });
});
