import { describe, expect, it } from 'vitest';
import { createDevices, createTemplate } from '../helpers/registry-api.js';
import { http, useService } from '../helpers/service.js';
import { thermometer } from './fixtures.js';

const svc = useService();

describe('GET /device/{id}', () => {
  it('answers the same view every time (also once cached)', async () => {
    const t = await createTemplate(svc.base, svc.token, thermometer);
    const [{ id }] = await createDevices(svc.base, svc.token, { label: 'g', templates: [t.id] });
    const first = await http('GET', `${svc.base}/device/${id}`, { token: svc.token });
    const second = await http('GET', `${svc.base}/device/${id}`, { token: svc.token });
    expect(first.status).toBe(200);
    expect(first.headers.get('content-type')).toBe('application/json');
    expect(second.text).toBe(first.text);
  });

  it.each(['ffffff', 'nope', 'x'.repeat(300), "a'; DROP TABLE devices;--", '%00', '%E2%82%AC'])(
    'unknown id %s: 404 No such device',
    async (id) => {
      const res = await http('GET', `${svc.base}/device/${id}`, { token: svc.token });
      expect(res.status).toBe(404);
      expect(res.body).toEqual({ message: `No such device: ${decodeURIComponent(id)}`, status: 404 });
    },
  );

  it('a deleted device is gone at once, even after being cached', async () => {
    const [{ id }] = await createDevices(svc.base, svc.token, { label: 'gone', templates: [] });
    expect((await http('GET', `${svc.base}/device/${id}`, { token: svc.token })).status).toBe(200);
    await http('DELETE', `${svc.base}/device/${id}`, { token: svc.token });
    expect((await http('GET', `${svc.base}/device/${id}`, { token: svc.token })).status).toBe(404);
  });
});
