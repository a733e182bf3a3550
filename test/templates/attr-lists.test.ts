// The three attribute lists of a template: which types go to data_attrs and config_attrs, attrs
// in attribute id order (also after a PUT), and attr_format (an unknown value means both). Each
// describe block works in a fresh tenant.
import { beforeAll, describe, expect, it } from 'vitest';
import type { AttrView, TemplateInFormat, TemplateView } from '../helpers/api.js';
import { http, useService } from '../helpers/service.js';
import { labelsOf, templateTenant, type TemplateTenant } from './fixtures.js';

const svc = useService();

describe('GET /template?attr_format=<unknown>: means both', () => {
  let u: TemplateTenant;

  beforeAll(async () => {
    u = await templateTenant(svc, 'edges-format');
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
    expect(Object.keys(single.body.templates[0]!)).toEqual(['id', 'label', 'created', 'attrs']);
    const split = await u.list('?attr_format=split');
    expect(Object.keys(split.body.templates[1]!)).toEqual(['id', 'label', 'created', 'data_attrs', 'config_attrs']);
    const both = await u.list('?attr_format=both');
    expect(both.body).toEqual((await u.list()).body);
  });
});

describe('attribute types: data_attrs, config_attrs and attrs', () => {
  let u: TemplateTenant;
  beforeAll(async () => {
    u = await templateTenant(svc, 'edges-types');
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
  const ids = (list: AttrView[]) => list.map((a) => a.id);
  const ascending = (list: number[]) => [...list].sort((a, b) => a - b);

  function expectSplit(template: TemplateView<number | string> | undefined, data: string[], config: string[], all: string[]) {
    const t = template!;
    expect(labelsOf(t.data_attrs)).toEqual(data);
    expect(labelsOf(t.config_attrs)).toEqual(config);
    expect(labelsOf(t.attrs)).toEqual(all);
    expect(ids(t.attrs)).toEqual(ascending(ids(t.attrs)));
    // attrs holds every attribute listed in both, as the same objects
    expect([...t.data_attrs, ...t.config_attrs].sort((a, b) => a.id - b.id)).toEqual(t.attrs);
  }

  it('unknown and mqtt_meta types go to config_attrs; dynamic, static, actuator to data_attrs', async () => {
    const t = await u.create(body);
    expectSplit(t, ['dyn', 'st', 'act'], ['odd', 'mm', 'me'], ['odd', 'dyn', 'mm', 'st', 'act', 'me']);
    expect(t.attrs[0]).toMatchObject({ type: 'foo', value_type: 'string' });
    expectSplit((await u.get(t.id)).body, ['dyn', 'st', 'act'], ['odd', 'mm', 'me'], ['odd', 'dyn', 'mm', 'st', 'act', 'me']);
    const listed = (await u.list()).body.templates.find((x) => x.id === t.id);
    expectSplit(listed, ['dyn', 'st', 'act'], ['odd', 'mm', 'me'], ['odd', 'dyn', 'mm', 'st', 'act', 'me']);
  });

  it('after a PUT, attrs is ordered by attribute id, not by the order of the body', async () => {
    const t = await u.create(body);
    const old = Object.fromEntries(t.attrs.map((a) => [a.label, a.id]));
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
    expect(up.attrs[0]!.id).toBe(old.odd);
    expect(up.attrs[1]!.id).toBe(old.act);
    expect(up.attrs.find((a) => a.label === 'mm')!.id).not.toBe(old.mm);
    expectSplit((await u.get(t.id)).body, ['act', 'new-dyn', 'mm'], ['odd', 'new-foo'], ['odd', 'act', 'new-dyn', 'new-foo', 'mm']);
  });

  it('attr_format=split and single keep the same split and order', async () => {
    const t = await u.create(body);
    const split = (await http<TemplateInFormat>('GET', `${svc.base}/template/${t.id}?attr_format=split`, { token: u.token })).body;
    expect(labelsOf(split.data_attrs!)).toEqual(['dyn', 'st', 'act']);
    expect(labelsOf(split.config_attrs!)).toEqual(['odd', 'mm', 'me']);
    const single = (await http<TemplateInFormat>('GET', `${svc.base}/template/${t.id}?attr_format=single`, { token: u.token })).body;
    expect(labelsOf(single.attrs!)).toEqual(['odd', 'dyn', 'mm', 'st', 'act', 'me']);
  });
});
