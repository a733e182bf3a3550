import { describe, expect, it } from 'vitest';
import type { TemplateList } from '../helpers/api.js';
import { countOf } from '../helpers/db.js';
import { createTemplate } from '../helpers/registry-api.js';
import { http, useService } from '../helpers/service.js';
import { sensorBody } from './fixtures.js';

const svc = useService();

describe('DELETE /template/{id}', () => {
  it('removes the template: {removed, result} with a string id', async () => {
    const t = await createTemplate(svc.base, svc.token, sensorBody());
    const res = await http('DELETE', `${svc.base}/template/${t.id}`, { token: svc.token });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ removed: { ...t, id: String(t.id) }, result: 'ok' });
    expect((await http('GET', `${svc.base}/template/${t.id}`, { token: svc.token })).status).toBe(404);
    expect(await countOf(svc.service.pool, 'SELECT count(*)::int AS n FROM template_attrs WHERE template_id = $1', [t.id])).toBe(0);
  });

  it.each(['999999', 'abc'])('unknown id %s: 404', async (id) => {
    const res = await http('DELETE', `${svc.base}/template/${id}`, { token: svc.token });
    expect(res.status).toBe(404);
    expect(res.body).toEqual({ message: `No such template: ${id}`, status: 404 });
  });
});

describe('DELETE /template', () => {
  it('removes every template: {removed: [...], result} with string ids', async () => {
    const a = await createTemplate(svc.base, svc.token, { label: 'a' });
    const b = await createTemplate(svc.base, svc.token, sensorBody());
    const res = await http('DELETE', `${svc.base}/template`, { token: svc.token });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({
      removed: [
        { ...a, id: String(a.id) },
        { ...b, id: String(b.id) },
      ],
      result: 'ok',
    });
    expect((await http<TemplateList>('GET', `${svc.base}/template`, { token: svc.token })).body.templates).toEqual([]);
  });

  it('with nothing to remove: an empty list', async () => {
    const res = await http('DELETE', `${svc.base}/template`, { token: svc.token });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ removed: [], result: 'ok' });
  });
});
