import { describe, expect, it } from 'vitest';
import type { TemplateUpdated, TemplateView } from '../helpers/api.js';
import { countOf } from '../helpers/db.js';
import { createTemplate } from '../helpers/registry-api.js';
import { http, useService } from '../helpers/service.js';
import { sensorBody, TS } from './fixtures.js';

const svc = useService();

const put = (id: string | number, body: unknown) => http<TemplateUpdated>('PUT', `${svc.base}/template/${id}`, { token: svc.token, body });
const get = (id: number) => http<TemplateView>('GET', `${svc.base}/template/${id}`, { token: svc.token });
const byLabel = (t: TemplateView<number | string>, label: string) => t.attrs.find((a) => a.label === label);

describe('PUT /template/{id}', () => {
  it('replaces label and attributes: {updated, result} with a string id and an updated time', async () => {
    const t = await createTemplate(svc.base, svc.token, sensorBody());
    const res = await put(t.id, { label: 'Renamed', attrs: [{ label: 'temperature', type: 'dynamic', value_type: 'float' }] });
    expect(res.status).toBe(200);
    expect(Object.keys(res.body).sort()).toEqual(['result', 'updated']);
    expect(res.body.result).toBe('ok');
    const u = res.body.updated;
    expect(u.id).toBe(String(t.id));
    expect(u.label).toBe('Renamed');
    expect(u.created).toBe(t.created);
    expect(u.updated).toMatch(TS);
    expect(u.attrs.map((a) => a.label)).toEqual(['temperature']);
    expect(u.data_attrs.map((a) => a.label)).toEqual(['temperature']);
    expect(u.config_attrs).toEqual([]);
    const got = (await get(t.id)).body;
    expect(got).toEqual({ ...u, id: t.id });
  });

  it('keeps the identity of attributes whose (label, type) survive; replaces the others', async () => {
    const t = await createTemplate(svc.base, svc.token, sensorBody());
    const body = sensorBody();
    body.attrs = [
      { label: 'model', type: 'static', value_type: 'string', static_value: 'T-2000' }, // kept, new value
      { label: 'temperature', type: 'dynamic', value_type: 'integer' }, // kept, new value type
      { label: 'led', type: 'dynamic', value_type: 'bool' }, // type changed: replaced
      { label: 'humidity', type: 'dynamic', value_type: 'float' }, // new
      // protocol: removed
    ];
    const res = await put(t.id, body);
    expect(res.status).toBe(200);
    const u = res.body.updated;
    const [oldModel, oldTemp] = [byLabel(t, 'model')!, byLabel(t, 'temperature')!];
    expect(byLabel(u, 'model')).toMatchObject({ id: oldModel.id, created: oldModel.created, static_value: 'T-2000' });
    expect(byLabel(u, 'model')!.updated).toMatch(TS);
    expect(byLabel(u, 'temperature')).toMatchObject({ id: oldTemp.id, created: oldTemp.created, value_type: 'integer' });
    expect(byLabel(u, 'led')!.id).not.toBe(byLabel(t, 'led')!.id);
    expect(byLabel(u, 'led')!.type).toBe('dynamic');
    expect(byLabel(u, 'protocol')).toBeUndefined();
    // attributes in id order: kept ones first, new ones after
    expect(u.attrs.map((a) => a.label)).toEqual(['temperature', 'model', 'led', 'humidity']);
    expect(await countOf(svc.service.pool, 'SELECT count(*)::int AS n FROM template_attrs WHERE template_id = $1', [t.id])).toBe(4);
  });

  it('an unchanged attribute keeps its fields and gets no updated time', async () => {
    const t = await createTemplate(svc.base, svc.token, sensorBody());
    const u = (await put(t.id, sensorBody())).body.updated;
    expect(u.attrs).toEqual(t.attrs);
  });

  it('metadata of a kept attribute keep their identity too', async () => {
    const t = await createTemplate(svc.base, svc.token, sensorBody());
    const protocol = byLabel(t, 'protocol')!;
    const body = sensorBody();
    body.attrs[3]!.metadata = [
      { label: 'unit', type: 'static', value_type: 'string', static_value: 'celsius' },
      { label: 'extra', type: 'static', value_type: 'string', static_value: 'e' },
    ];
    const u = (await put(t.id, body)).body.updated;
    const meta = byLabel(u, 'protocol')!.metadata!;
    expect(meta[0]).toMatchObject({ id: protocol.metadata![0]!.id, label: 'unit', static_value: 'celsius' });
    expect(meta[1]).toMatchObject({ label: 'extra' });
    expect(meta[1]).not.toHaveProperty('template_id');
  });

  it('bad body: 400 and nothing changes (checked before the lookup)', async () => {
    const t = await createTemplate(svc.base, svc.token, sensorBody());
    const res = await put(t.id, { attrs: [] });
    expect(res.status).toBe(400);
    expect(res.body).toEqual({ message: 'failed to parse input', errors: { label: ['Missing data for required field.'] } });
    const bad = await put(t.id, { label: 'x', attrs: [{ label: 'a b', type: 'dynamic', value_type: 'float' }] });
    expect(bad.body).toEqual({
      message: 'failed to parse attr',
      errors: { label: ['Labels must contain letters, numbers or dashes(-_)'] },
    });
    expect((await get(t.id)).body).toEqual(t);
    expect((await put(999999, { attrs: [] })).status).toBe(400);
  });

  it.each(['999999', 'abc', '-2'])('unknown id %s: 404 No such template', async (id) => {
    const res = await put(id, { label: 'x' });
    expect(res.status).toBe(404);
    expect(res.body).toEqual({ message: `No such template: ${id}`, status: 404 });
  });
});
