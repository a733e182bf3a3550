// Template bodies shared by the template (and device) tests, and a tenant's template routes.
import { expect } from 'vitest';
import type {
  TemplateBody,
  TemplateBodyWithAttrs,
  TemplateCreated,
  TemplateList,
  TemplateRemoved,
  TemplatesRemoved,
  TemplateUpdated,
  TemplateView,
} from '../helpers/api.js';
import { countOf } from '../helpers/db.js';
import { createTemplate } from '../helpers/registry-api.js';
import { http, type ApiResponse, type ServiceForFile } from '../helpers/service.js';

export const TS = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}\+00:00$/;

export const sensorBody = (): TemplateBodyWithAttrs => ({
  label: 'SensorModel',
  attrs: [
    { label: 'temperature', type: 'dynamic', value_type: 'float' },
    { label: 'model', type: 'static', value_type: 'string', static_value: 'T-1000' },
    { label: 'led', type: 'actuator', value_type: 'bool' },
    {
      label: 'protocol',
      type: 'meta',
      value_type: 'string',
      static_value: 'mqtt',
      metadata: [{ label: 'unit', type: 'static', value_type: 'string', static_value: 'none' }],
    },
  ],
});

export const labelsOf = (list: Array<{ label: string }>) => list.map((x) => x.label);

/** A user of a fresh tenant (`<prefix>-<6 hex>`) with the template routes bound to it. */
export async function templateTenant(svc: ServiceForFile, prefix: string) {
  const { tenant, token } = await svc.freshTenant(prefix);
  return {
    tenant,
    token,
    create: (body: TemplateBody = sensorBody()) => createTemplate(svc.base, token, body),
    post: (body: unknown, headers?: Record<string, string>) =>
      http<TemplateCreated>('POST', `${svc.base}/template`, { token, body, headers }),
    put: (id: string | number, body: unknown, headers?: Record<string, string>) =>
      http<TemplateUpdated>('PUT', `${svc.base}/template/${id}`, { token, body, headers }),
    get: (id: string | number) => http<TemplateView>('GET', `${svc.base}/template/${id}`, { token }),
    list: (query = '') => http<TemplateList>('GET', `${svc.base}/template${query}`, { token }),
    del: (id: string | number) => http<TemplateRemoved>('DELETE', `${svc.base}/template/${id}`, { token }),
    delAll: () => http<TemplatesRemoved>('DELETE', `${svc.base}/template`, { token }),
    /** Templates of this tenant, counted in the database. */
    count: () => countOf(svc.service.pool, 'SELECT count(*)::int AS n FROM templates WHERE tenant = $1', [tenant]),
    /** Attribute rows (metadata included) of this tenant. */
    attrCount: () => countOf(svc.service.pool, 'SELECT count(*)::int AS n FROM template_attrs WHERE tenant = $1', [tenant]),
  };
}
export type TemplateTenant = Awaited<ReturnType<typeof templateTenant>>;

/** The answer a refused request must get. */
export interface Refusal {
  status: number;
  body: unknown;
}

/**
 * Sends a request that must be refused as `refusal` says, and checks that it changed nothing:
 * the tenant's template and attribute rows, and `unchanged` (a template) as GET shows it.
 * `what` names the request in a failure's message.
 */
export async function expectRefused(
  u: TemplateTenant,
  send: () => Promise<ApiResponse>,
  { status, body: expected }: Refusal,
  { unchanged, what = '' }: { unchanged?: { id: number }; what?: string } = {},
) {
  const [before, attrsBefore] = [await u.count(), await u.attrCount()];
  const res = await send();
  expect(res.status, `${what} ${res.text}`).toBe(status);
  expect(res.body, what).toEqual(expected);
  expect(await u.count()).toBe(before);
  expect(await u.attrCount()).toBe(attrsBefore);
  if (unchanged) expect((await u.get(unchanged.id)).body).toEqual(unchanged);
}

/** `t` with its id as a string, as PUT and both DELETE routes answer it. */
export const asStringId = (t: TemplateView): TemplateView<string> => ({ ...t, id: String(t.id) });

export const JSON_MESSAGE = 'Payload must be valid JSON, and Content-Type set accordingly';
