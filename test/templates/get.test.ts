import { beforeAll, describe, expect, it } from 'vitest';
import type { TemplateInFormat, TemplateView } from '../helpers/api.js';
import { createTemplate } from '../helpers/registry-api.js';
import { http, useService } from '../helpers/service.js';
import { sensorBody } from './fixtures.js';

const svc = useService();
let t: TemplateView;

beforeAll(async () => {
  t = await createTemplate(svc.base, svc.token, sensorBody());
});

const get = (path: string) => http<TemplateInFormat>('GET', `${svc.base}${path}`, { token: svc.token });

describe('GET /template/{id}', () => {
  it('returns the template with an integer id and all three lists', async () => {
    const res = await get(`/template/${t.id}`);
    expect(res.status).toBe(200);
    expect(res.body.id).toBe(t.id);
    expect(Object.keys(res.body)).toEqual(['id', 'label', 'created', 'attrs', 'data_attrs', 'config_attrs']);
  });

  it('attr_format=single omits data_attrs and config_attrs', async () => {
    const res = await get(`/template/${t.id}?attr_format=single`);
    expect(Object.keys(res.body)).toEqual(['id', 'label', 'created', 'attrs']);
    expect(res.body.attrs).toEqual(t.attrs);
  });

  it('attr_format=split omits attrs', async () => {
    const res = await get(`/template/${t.id}?attr_format=split`);
    expect(Object.keys(res.body)).toEqual(['id', 'label', 'created', 'data_attrs', 'config_attrs']);
    expect(res.body.data_attrs).toEqual(t.data_attrs);
    expect(res.body.config_attrs).toEqual(t.config_attrs);
  });

  it('attr_format=both or an unknown value: all three lists', async () => {
    expect((await get(`/template/${t.id}?attr_format=both`)).body).toEqual(t);
    expect((await get(`/template/${t.id}?attr_format=weird`)).body).toEqual(t);
  });

  it.each(['999999', 'abc', '1.5', '-1', '0', '99999999999999999999999', '%20', "1'--"])(
    'unknown id %s: 404 No such template',
    async (id) => {
      const res = await get(`/template/${id}`);
      expect(res.status).toBe(404);
      expect(res.body).toEqual({ message: `No such template: ${decodeURIComponent(id)}`, status: 404 });
    },
  );

  it.each(['%20{id}', '{id}%20', '+{id}', '0{id}x'])('an existing id with anything around it (%s): 404', async (pattern) => {
    const id = pattern.replace('{id}', String(t.id));
    const res = await get(`/template/${id}`);
    expect(res.status).toBe(404);
    expect(res.body).toEqual({ message: `No such template: ${decodeURIComponent(id)}`, status: 404 });
  });
});
