// Keyed templates and devices, and the two key routes, shared by the pre-shared key tests.
import type { AttrView, DeviceView, KeyRecord, TemplateBodyWithAttrs, TemplateView } from '../helpers/api.js';
import { createDevices, createTemplate } from '../helpers/registry-api.js';
import { http } from '../helpers/service.js';

export const keyed: TemplateBodyWithAttrs = {
  label: 'Keyed',
  attrs: [
    { label: 'temperature', type: 'dynamic', value_type: 'float' },
    { label: 'key', type: 'static', value_type: 'psk' },
    { label: 'spare', type: 'static', value_type: 'psk' },
    { label: 'serial', type: 'static', value_type: 'string', static_value: 'SN' },
  ],
};

/** A template with two psk attributes and `n` devices built from it; returns the ids. */
export async function keyedDevices(base: string, token: string, n = 1): Promise<{ template: TemplateView; ids: string[] }> {
  const template = await createTemplate(base, token, keyed);
  const made = await createDevices(base, token, { label: 'k', templates: [template.id] }, `?count=${n}`);
  return { template, ids: made.map((d) => d.id) };
}

/** POST /device/gen_psk/{id}: the keys (200), no body (204) or an error. */
export const genPsk = (base: string, token: string, id: string, query: string) =>
  http<KeyRecord[]>('POST', `${base}/device/gen_psk/${id}${query}`, { token });

export const copyPsk = (base: string, token: string, id: string, label: string, query: string) =>
  http('PUT', `${base}/device/${id}/attrs/${label}/psk${query}`, { token });

/** The attribute `label` of a device view (any template). */
export function attrOf(view: DeviceView, label: string): AttrView | undefined {
  return Object.values(view.attrs)
    .flat()
    .find((a) => a.label === label);
}
