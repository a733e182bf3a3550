import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { http, login, startTestService, type TestService } from '../helpers/service.js';
import { createTemplate } from './fixtures.js';

let svc: TestService;
let token: string;

beforeAll(async () => {
  svc = await startTestService();
  token = await login(svc.base);
});
afterAll(() => svc?.stop());

describe('DELETE /template/{id}', () => {
  it('removes the template: {removed, result} with a string id', async () => {
    const t = await createTemplate(svc.base, token);
    const res = await http('DELETE', `${svc.base}/template/${t.id}`, { token });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ removed: { ...t, id: String(t.id) }, result: 'ok' });
    expect((await http('GET', `${svc.base}/template/${t.id}`, { token })).status).toBe(404);
    const left = await svc.service.pool.query('SELECT count(*)::int AS n FROM template_attrs WHERE template_id = $1', [t.id]);
    expect(left.rows[0].n).toBe(0);
  });

  it.each(['999999', 'abc'])('unknown id %s: 404', async (id) => {
    const res = await http('DELETE', `${svc.base}/template/${id}`, { token });
    expect(res.status).toBe(404);
    expect(res.body).toEqual({ message: `No such template: ${id}`, status: 404 });
  });
});

describe('DELETE /template', () => {
  it('removes every template: {removed: [...], result} with string ids', async () => {
    const a = await createTemplate(svc.base, token, { label: 'a' });
    const b = await createTemplate(svc.base, token);
    const res = await http('DELETE', `${svc.base}/template`, { token });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ removed: [{ ...a, id: String(a.id) }, { ...b, id: String(b.id) }], result: 'ok' });
    expect((await http('GET', `${svc.base}/template`, { token })).body.templates).toEqual([]);
  });

  it('with nothing to remove: an empty list', async () => {
    const res = await http('DELETE', `${svc.base}/template`, { token });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ removed: [], result: 'ok' });
  });
});
