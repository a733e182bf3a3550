// Timestamps, optional fields and id types in the template answers: `created` always and
// `updated` once set (UTC, as TS), the id an integer in create/list answers and a string in PUT
// and DELETE answers. Works in a fresh tenant.
import { beforeAll, describe, expect, it } from 'vitest';
import type { AttrView, TemplateUpdated, TemplateView } from '../helpers/api.js';
import { useService } from '../helpers/service.js';
import { asStringId, sensorBody, templateTenant, type TemplateTenant, TS } from './fixtures.js';

const svc = useService();

/** A timestamp of the contract's form that is also "now" in UTC (not local time labelled +00:00). */
function expectRecentUtc(ts: string, since: number) {
  expect(ts).toMatch(TS);
  const ms = Date.parse(ts);
  expect(ms).toBeGreaterThanOrEqual(since - 5_000);
  expect(ms).toBeLessThanOrEqual(Date.now() + 5_000);
}

describe('timestamps, optional fields and id types in list, PUT and DELETE answers', () => {
  let u: TemplateTenant;
  let since: number;
  let plain: TemplateView; // never updated
  let changed: TemplateView; // updated by PUT
  let putAnswer: TemplateUpdated;

  beforeAll(async () => {
    u = await templateTenant(svc, 'edges-ts');
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
  function expectAttrView(view: AttrView | undefined, templateId: string | null, fields: string[]) {
    const a = view!;
    expect(Object.keys(a).sort()).toEqual([...fields].sort());
    expect(typeof a.id).toBe('number');
    expectRecentUtc(a.created, since);
    if (templateId !== null) expect(a.template_id).toBe(templateId);
    if ('updated' in a) expectRecentUtc(a.updated!, since);
  }

  const BASE = ['id', 'label', 'type', 'value_type', 'template_id', 'created'];

  function expectPlain(template: TemplateView<number | string> | undefined, idType: 'number' | 'string') {
    const t = template!;
    expect(typeof t.id).toBe(idType);
    expect(Object.keys(t)).toEqual(['id', 'label', 'created', 'attrs', 'data_attrs', 'config_attrs']);
    expectRecentUtc(t.created, since);
    const [temp, key, proto] = t.attrs;
    expectAttrView(temp, String(plain.id), BASE);
    expectAttrView(key, String(plain.id), BASE); // psk without a value: no static_value
    expectAttrView(proto, String(plain.id), [...BASE, 'static_value', 'metadata']);
    expectAttrView(proto!.metadata![0], null, ['id', 'label', 'type', 'value_type', 'static_value', 'created']);
  }

  function expectChanged(template: TemplateView<number | string> | undefined, idType: 'number' | 'string') {
    const t = template!;
    expect(typeof t.id).toBe(idType);
    expect(Object.keys(t)).toEqual(['id', 'label', 'created', 'updated', 'attrs', 'data_attrs', 'config_attrs']);
    expect(t.created).toBe(changed.created);
    expectRecentUtc(t.updated!, since);
    expect(Date.parse(t.updated!)).toBeGreaterThanOrEqual(Date.parse(t.created));
    const byLabel = Object.fromEntries(t.attrs.map((a) => [a.label, a]));
    expectAttrView(byLabel.temperature, String(changed.id), BASE);
    expectAttrView(byLabel.model, String(changed.id), [...BASE, 'static_value', 'updated']);
    expectAttrView(byLabel.led, String(changed.id), BASE);
    expectAttrView(byLabel.protocol, String(changed.id), [...BASE, 'static_value', 'metadata']);
    expect(byLabel.model!.static_value).toBe('T-2000');
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
    expect(res.body.removed).toEqual(asStringId(listed[1]!));
    // and it is gone
    expect((await u.get(changed.id)).status).toBe(404);
    expect(await u.count()).toBe(1);
  });

  it('DELETE /template: every removed item has a string id; updated only where set', async () => {
    const again = await u.create(sensorBody());
    const res2 = await u.put(again.id, { ...sensorBody(), label: 'again' });
    expect(res2.status).toBe(200);
    const listed = (await u.list()).body.templates;
    expect(listed.map((t) => t.id)).toEqual([plain.id, again.id]);
    const res = await u.delAll();
    expect(res.status).toBe(200);
    expect(Object.keys(res.body).sort()).toEqual(['removed', 'result']);
    expect(res.body.result).toBe('ok');
    const [p, a] = res.body.removed;
    expect(res.body.removed).toHaveLength(2);
    expectPlain(p, 'string');
    expect(a).toMatchObject({ id: String(again.id), label: 'again' });
    expect(Object.keys(a!)).toEqual(['id', 'label', 'created', 'updated', 'attrs', 'data_attrs', 'config_attrs']);
    expectRecentUtc(a!.updated!, since);
    // an unchanged PUT of an attribute sets no attribute updated time
    for (const attr of a!.attrs) expect(attr).not.toHaveProperty('updated');
    expect(res.body.removed).toEqual(listed.map(asStringId));
    expect(await u.count()).toBe(0);
    expect((await u.list()).body).toEqual({ templates: [], pagination: { page: 1, total: 0, has_next: false, next_page: null } });
  });
});
