import { beforeAll, describe, expect, it } from 'vitest';
import type { TemplateList, TemplateView } from '../helpers/api.js';
import { createTemplate } from '../helpers/registry-api.js';
import { http, useService } from '../helpers/service.js';
import { sensorBody } from './fixtures.js';

const svc = useService();
let first: string;
let second: string;
let t: TemplateView;

beforeAll(async () => {
  first = (await svc.freshTenant('tenant-one')).token;
  second = (await svc.freshTenant('tenant-two')).token;
  t = await createTemplate(svc.base, first, sensorBody());
});

describe('tenant isolation of templates', () => {
  it("a second tenant lists none of the first tenant's templates", async () => {
    const res = await http('GET', `${svc.base}/template?attr_type=dynamic&label=Sensor`, { token: second });
    expect(res.body).toEqual({ templates: [], pagination: { page: 1, total: 0, has_next: false, next_page: null } });
    expect((await http<TemplateList>('GET', `${svc.base}/template`, { token: second })).body.templates).toEqual([]);
  });

  it("the first tenant's ids answer 404 to the second for get, update and delete", async () => {
    const notFound = { message: `No such template: ${t.id}`, status: 404 };
    for (const [method, body] of [['GET'], ['PUT', { label: 'stolen' }], ['DELETE']] as const) {
      const res = await http(method, `${svc.base}/template/${t.id}`, { token: second, body });
      expect(res.status).toBe(404);
      expect(res.body).toEqual(notFound);
    }
    expect((await http('DELETE', `${svc.base}/template`, { token: second })).body).toEqual({ removed: [], result: 'ok' });
    expect((await http('GET', `${svc.base}/template/${t.id}`, { token: first })).body).toEqual(t);
  });
});
