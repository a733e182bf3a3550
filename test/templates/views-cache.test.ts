// GET /template and GET /template/{id} write each template from a cached view: every change
// shows in the next answer at once, whatever was read (and cached) before it.
import { describe, expect, it } from 'vitest';
import type { TemplateBodyWithAttrs, TemplateCreated, TemplateInFormat, TemplateList, TemplateView } from '../helpers/api.js';
import { anyString } from '../helpers/matchers.js';
import { http, login, startTestService, useService } from '../helpers/service.js';

const svc = useService();

const ok = async <T = unknown>(method: string, path: string, body?: unknown, base = svc.base, auth = svc.token) => {
  const res = await http<T>(method, `${base}${path}`, { token: auth, body });
  expect(res.status, res.text).toBe(200);
  return res.body;
};

const sensor = (label: string, serial: string): TemplateBodyWithAttrs => ({
  label,
  attrs: [
    { label: 'temperature', type: 'dynamic', value_type: 'float' },
    { label: 'serial', type: 'static', value_type: 'string', static_value: serial },
    { label: 'proto', type: 'meta', value_type: 'string', static_value: 'mqtt' },
  ],
});

describe('template views after changes', () => {
  it('show each change at once: update, deletion, in every attr_format', async () => {
    const a = (await ok<TemplateCreated>('POST', '/template', sensor('cache-a', 'one'))).template;
    const b = (await ok<TemplateCreated>('POST', '/template', sensor('cache-b', 'one'))).template;
    const formats = ['', '&attr_format=single', '&attr_format=split'];
    for (const f of formats) {
      await ok('GET', `/template?label=cache-${f}`);
      await ok('GET', `/template/${a.id}?x=1${f}`);
    }

    await ok('PUT', `/template/${a.id}`, sensor('cache-a2', 'two'));
    const got = await ok<TemplateView>('GET', `/template/${a.id}`);
    expect(got).toMatchObject({ id: a.id, label: 'cache-a2', updated: anyString() });
    expect(got.attrs.find((x) => x.label === 'serial')!.static_value).toBe('two');
    for (const f of formats) {
      const listed = await ok<TemplateList<TemplateInFormat>>('GET', `/template?label=cache-${f}`);
      expect(listed.templates.map((t) => t.label)).toEqual(['cache-a2', 'cache-b']);
      expect(listed.templates[0]).toEqual(await ok('GET', `/template/${a.id}?x=1${f}`));
    }
    expect((await ok<TemplateList>('GET', '/template?attr=serial=two')).templates.map((t) => t.id)).toEqual([a.id]);

    await ok('DELETE', `/template/${b.id}`);
    expect((await http('GET', `${svc.base}/template/${b.id}`, { token: svc.token })).status).toBe(404);
    const left = await ok<TemplateList>('GET', '/template?label=cache-&page_size=1');
    expect(left.templates.map((t) => t.id)).toEqual([a.id]);
    expect(left.pagination).toEqual({ page: 1, total: 1, has_next: false, next_page: null });
  });

  it('a page read again follows every change of which templates it holds (create, label, attributes, delete)', async () => {
    const a = (await ok<TemplateCreated>('POST', '/template', sensor('pg-a', 'S-1'))).template;
    const b = (await ok<TemplateCreated>('POST', '/template', sensor('pg-b', 'S-1'))).template;
    const labels = async (path: string) => (await ok<TemplateList>('GET', path)).templates.map((t) => t.label);
    const byLabel = '/template?label=pg-&sortBy=label&page_size=2';
    const bySerial = '/template?attr=serial=S-9';
    const geo = '/template?attr_type=geopoint&label=pg-';
    // Each page read once before the changes (and so cached).
    expect(await labels(byLabel)).toEqual(['pg-a', 'pg-b']);
    expect(await labels(bySerial)).toEqual([]);
    expect(await labels(geo)).toEqual([]);

    await ok('POST', '/template', sensor('pg-0', 'S-1'));
    expect(await labels(byLabel)).toEqual(['pg-0', 'pg-a']);
    await ok('PUT', `/template/${a.id}`, sensor('pg-z', 'S-9'));
    expect(await labels(byLabel)).toEqual(['pg-0', 'pg-b']);
    expect(await labels(bySerial)).toEqual(['pg-z']);
    const withGeo = sensor('pg-b', 'S-1');
    withGeo.attrs.push({ label: 'where', type: 'dynamic', value_type: 'geopoint' });
    await ok('PUT', `/template/${b.id}`, withGeo);
    expect(await labels(geo)).toEqual(['pg-b']);
    await ok('DELETE', `/template/${b.id}`);
    expect(await labels(geo)).toEqual([]);
    expect(await labels(byLabel)).toEqual(['pg-0', 'pg-z']);
    expect((await ok<TemplateList>('GET', byLabel)).pagination).toEqual({ page: 1, total: 1, has_next: false, next_page: null });
  });

  it("a template is cached as created: a change behind the service's back (no event) does not show", async () => {
    const t = (await ok<TemplateCreated>('POST', '/template', sensor('born', 'x'))).template;
    await svc.service.pool.query("UPDATE templates SET label = 'changed-behind' WHERE id = $1", [t.id]);
    expect((await ok<TemplateView>('GET', `/template/${t.id}`)).label).toBe('born');
    expect(await ok('GET', `/template/${t.id}?attr_format=split`)).toEqual({
      ...t,
      attrs: undefined,
      data_attrs: t.data_attrs,
      config_attrs: t.config_attrs,
    });
  });

  it('the same JSON with the cache off; another tenant sees none of it', async () => {
    const t = (await ok<TemplateCreated>('POST', '/template', sensor('nocache', 'x'))).template;
    const cached = await http('GET', `${svc.base}/template/${t.id}?attr_format=split`, { token: svc.token });
    const cachedList = await http('GET', `${svc.base}/template?label=nocache`, { token: svc.token });
    const plain = await startTestService({
      DATABASE_URL: svc.env.DATABASE_URL,
      PSK_ENCRYPTION_KEY: svc.env.PSK_ENCRYPTION_KEY,
      TEMPLATE_CACHE_SIZE: '0',
    });
    try {
      const other = await login(plain.base);
      expect((await http('GET', `${plain.base}/template/${t.id}?attr_format=split`, { token: other })).text).toBe(cached.text);
      expect((await http('GET', `${plain.base}/template?label=nocache`, { token: other })).text).toBe(cachedList.text);
    } finally {
      await plain.stop();
    }
    const res = await http('POST', `${svc.base}/auth/user`, {
      token: svc.token,
      body: { username: 'cache-other', passwd: 'pw', service: 'cache-other', profile: 'user' },
    });
    expect(res.status).toBe(201);
    const other = await login(svc.base, 'cache-other', 'pw');
    expect((await http('GET', `${svc.base}/template/${t.id}`, { token: other })).status).toBe(404);
    expect((await http<TemplateList>('GET', `${svc.base}/template`, { token: other })).body.templates).toEqual([]);
  });
});
