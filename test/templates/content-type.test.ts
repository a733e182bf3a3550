// Content-Type on POST and PUT /template: JSON with parameters is read; anything else, or a body
// that is not JSON, is 400 and changes nothing. Works in a fresh tenant.
import { beforeAll, describe, expect, it } from 'vitest';
import type { TemplateCreated, TemplateUpdated } from '../helpers/api.js';
import { http, useService } from '../helpers/service.js';
import { expectRefused, JSON_MESSAGE, labelsOf, sensorBody, templateTenant, type TemplateTenant } from './fixtures.js';

const svc = useService();

describe('Content-Type on POST and PUT /template', () => {
  let u: TemplateTenant;
  beforeAll(async () => {
    u = await templateTenant(svc, 'edges-ctype');
  });

  it('POST accepts application/json; charset=utf-8', async () => {
    const before = await u.count();
    const res = await u.post(
      { label: 'charset', attrs: [{ label: 'température', type: 'dynamic', value_type: 'float' }] },
      { 'content-type': 'application/json; charset=utf-8' },
    );
    // The attribute label is outside the label alphabet: the body was read and validated.
    expect(res.status).toBe(400);
    expect(res.body).toEqual({
      message: 'failed to parse attr',
      errors: { label: ['Labels must contain letters, numbers or dashes(-_)'] },
    });
    const ok = await u.post(
      { label: 'Charset ✓', attrs: [{ label: 'temp', type: 'dynamic', value_type: 'float' }] },
      { 'content-type': 'application/json; charset=utf-8' },
    );
    expect(ok.status, ok.text).toBe(200);
    expect(ok.body.result).toBe('ok');
    expect(ok.body.template.label).toBe('Charset ✓');
    expect(labelsOf(ok.body.template.attrs)).toEqual(['temp']);
    expect(await u.count()).toBe(before + 1);
    expect((await u.get(ok.body.template.id)).body).toEqual(ok.body.template);
  });

  it('PUT accepts application/json; charset=utf-8', async () => {
    const t = await u.create();
    const res = await u.put(
      t.id,
      { label: 'Renamed ✓', attrs: [{ label: 'temperature', type: 'dynamic', value_type: 'float' }] },
      { 'content-type': 'application/json; charset=utf-8' },
    );
    expect(res.status, res.text).toBe(200);
    expect(res.body.result).toBe('ok');
    expect(res.body.updated.id).toBe(String(t.id));
    expect(res.body.updated.label).toBe('Renamed ✓');
    expect(labelsOf(res.body.updated.attrs)).toEqual(['temperature']);
    expect((await u.get(t.id)).body.label).toBe('Renamed ✓');
  });

  const bad: Array<[string, { rawBody: string | Buffer; headers: Record<string, string> }]> = [
    ['text/plain with a JSON body', { rawBody: JSON.stringify({ label: 'changed' }), headers: { 'content-type': 'text/plain' } }],
    [
      'text/plain; charset=utf-8 with a JSON body',
      { rawBody: JSON.stringify({ label: 'changed' }), headers: { 'content-type': 'text/plain; charset=utf-8' } },
    ],
    ['no Content-Type with a JSON body', { rawBody: Buffer.from(JSON.stringify({ label: 'changed' })), headers: {} }],
    ['application/json with a truncated body', { rawBody: '{"label": "changed"', headers: { 'content-type': 'application/json' } }],
    ['application/json with a body that is not JSON', { rawBody: 'label=changed', headers: { 'content-type': 'application/json' } }],
    ['application/json; charset=utf-8 with an empty body', { rawBody: '', headers: { 'content-type': 'application/json; charset=utf-8' } }],
  ];
  it.each(bad)('PUT %s: 400 and the template is unchanged', async (_name, opts) => {
    const t = await u.create();
    await expectRefused(
      u,
      () => http<TemplateUpdated>('PUT', `${svc.base}/template/${t.id}`, { token: u.token, ...opts }),
      { status: 400, body: { message: JSON_MESSAGE, status: 400 } },
      { unchanged: t },
    );
  });

  it('POST text/plain with a JSON body: 400, nothing created', async () => {
    const before = await u.count();
    const res = await http<TemplateCreated>('POST', `${svc.base}/template`, {
      token: u.token,
      rawBody: JSON.stringify(sensorBody()),
      headers: { 'content-type': 'text/plain' },
    });
    expect(res.status).toBe(400);
    expect(res.body).toEqual({ message: JSON_MESSAGE, status: 400 });
    expect(await u.count()).toBe(before);
  });
});
