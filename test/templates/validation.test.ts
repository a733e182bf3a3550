// Template bodies refused at their edges (field types, lengths, repeated labels, metadata), on
// POST and PUT: each 400 with its validation body, and nothing changed. Each describe block
// works in a fresh tenant.
import { beforeAll, describe, expect, it } from 'vitest';
import { countOf } from '../helpers/db.js';
import { useService } from '../helpers/service.js';
import { expectRefused, labelsOf, templateTenant, type TemplateTenant, TS } from './fixtures.js';

const svc = useService();

describe('PUT /template/{id}: validation leaves the template unchanged', () => {
  let u: TemplateTenant;
  beforeAll(async () => {
    u = await templateTenant(svc, 'edges-put');
  });

  it('attrs absent: 200, the template then has no attributes', async () => {
    const t = await u.create();
    const before = await u.count();
    const res = await u.put(t.id, { label: 'bare' });
    expect(res.status, res.text).toBe(200);
    expect(res.body).toEqual({
      result: 'ok',
      updated: {
        id: String(t.id),
        label: 'bare',
        created: t.created,
        updated: res.body.updated.updated,
        attrs: [],
        data_attrs: [],
        config_attrs: [],
      },
    });
    expect(res.body.updated.updated).toMatch(TS);
    expect((await u.get(t.id)).body).toEqual({ ...res.body.updated, id: t.id });
    expect(await u.count()).toBe(before);
    expect(
      await countOf(svc.service.pool, 'SELECT count(*)::int AS n FROM template_attrs WHERE tenant = $1 AND template_id = $2', [
        u.tenant,
        t.id,
      ]),
    ).toBe(0);
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
    [
      'template label missing',
      { attrs: [attr({})] },
      { message: 'failed to parse input', errors: { label: ['Missing data for required field.'] } },
    ],
    [
      'attrs an object',
      { label: 'o', attrs: { x: attr({}) } },
      { message: 'failed to parse input', errors: { attrs: ['Not a valid list.'] } },
    ],
    ['attrs null', { label: 'o', attrs: null }, { message: 'failed to parse input', errors: { attrs: ['Field may not be null.'] } }],
    [
      'attribute label a number',
      { label: 'n', attrs: [attr({ label: 7 })] },
      { message: 'failed to parse attr', errors: { label: ['Not a valid string.'] } },
    ],
    [
      'attribute type a number',
      { label: 'n', attrs: [attr({ type: 1 })] },
      { message: 'failed to parse attr', errors: { type: ['Not a valid string.'] } },
    ],
    [
      'attribute value_type a boolean',
      { label: 'n', attrs: [attr({ value_type: true })] },
      { message: 'failed to parse attr', errors: { value_type: ['Not a valid string.'] } },
    ],
    [
      'template label of 129 characters',
      { label: 'L'.repeat(129) },
      { message: 'failed to parse input', errors: { label: ['Longer than maximum length 128.'] } },
    ],
    [
      'attribute label of 129 characters',
      { label: 'l', attrs: [attr({ label: 'a'.repeat(129) })] },
      { message: 'failed to parse attr', errors: { label: ['Longer than maximum length 128.'] } },
    ],
    [
      'type of 33 characters',
      { label: 'l', attrs: [attr({ type: 't'.repeat(33) })] },
      { message: 'failed to parse attr', errors: { type: ['Longer than maximum length 32.'] } },
    ],
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
      "a bad attribute after a good one (one attribute's errors only)",
      { label: 'l', attrs: [attr({ label: 'good' }), attr({ label: 'bad', type: 'static', value_type: 'string', static_value: ['a'] })] },
      { message: 'failed to parse attr', errors: { static_value: ['Not a valid string.'] } },
    ],
  ];

  it.each(cases)('%s: 400 and nothing changes', async (_name, body, expected) => {
    const t = await u.create();
    await expectRefused(u, () => u.put(t.id, body), { status: 400, body: expected }, { unchanged: t });
  });

  it('the limits themselves are accepted on PUT (128 / 32 / 128)', async () => {
    const t = await u.create();
    const res = await u.put(t.id, {
      label: 'L'.repeat(128),
      attrs: [{ label: 'a'.repeat(128), type: 't'.repeat(32), value_type: 'v'.repeat(32), static_value: 's'.repeat(128) }],
    });
    expect(res.status, res.text).toBe(200);
    expect(res.body.updated.attrs[0]).toMatchObject({
      label: 'a'.repeat(128),
      type: 't'.repeat(32),
      value_type: 'v'.repeat(32),
      static_value: 's'.repeat(128),
    });
  });
});

describe('POST /template: field types and lengths', () => {
  let u: TemplateTenant;
  beforeAll(async () => {
    u = await templateTenant(svc, 'edges-post');
  });

  const attr = (over: Record<string, unknown>) => ({ label: 'x', type: 'dynamic', value_type: 'float', ...over });
  const cases: Array<[string, unknown, unknown]> = [
    [
      'type a number',
      { label: 'p', attrs: [attr({ type: 3 })] },
      { message: 'failed to parse attr', errors: { type: ['Not a valid string.'] } },
    ],
    [
      'type an object',
      { label: 'p', attrs: [attr({ type: { t: 'dynamic' } })] },
      { message: 'failed to parse attr', errors: { type: ['Not a valid string.'] } },
    ],
    [
      'value_type a number',
      { label: 'p', attrs: [attr({ value_type: 1.5 })] },
      { message: 'failed to parse attr', errors: { value_type: ['Not a valid string.'] } },
    ],
    [
      'value_type a list',
      { label: 'p', attrs: [attr({ value_type: ['float'] })] },
      { message: 'failed to parse attr', errors: { value_type: ['Not a valid string.'] } },
    ],
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
    await expectRefused(u, () => u.post(body), { status: 400, body: expected });
  });

  it('value_type of exactly 32 characters is accepted', async () => {
    const before = await u.count();
    const res = await u.post({ label: 'p', attrs: [attr({ value_type: 'v'.repeat(32) })] });
    expect(res.status, res.text).toBe(200);
    expect(res.body.template.attrs[0]!.value_type).toBe('v'.repeat(32));
    expect(await u.count()).toBe(before + 1);
  });
});

describe('metadata errors (POST and PUT)', () => {
  let u: TemplateTenant;
  beforeAll(async () => {
    u = await templateTenant(svc, 'edges-meta');
  });

  const withMeta = (metadata: unknown) => ({
    label: 'm',
    attrs: [{ label: 'proto', type: 'meta', value_type: 'string', static_value: 'mqtt', metadata }],
  });
  const unit = (over: Record<string, unknown> = {}) => ({
    label: 'unit',
    type: 'static',
    value_type: 'string',
    static_value: 'c',
    ...over,
  });
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
    await expectRefused(u, () => u.post(body), { status: 400, body: expected });
  });

  it.each(cases)('PUT, %s: 400, template unchanged', async (_name, body, expected) => {
    const t = await u.create();
    await expectRefused(u, () => u.put(t.id, body), { status: 400, body: expected }, { unchanged: t });
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
    expect(res.body.template.attrs.map((a) => labelsOf(a.metadata!))).toEqual([['unit'], ['unit']]);
  });
});
