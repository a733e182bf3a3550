import { http } from '../helpers/service.js';
import { createDevices, createTemplate } from '../devices/fixtures.js';

export const keyed = {
  label: 'Keyed',
  attrs: [
    { label: 'temperature', type: 'dynamic', value_type: 'float' },
    { label: 'key', type: 'static', value_type: 'psk' },
    { label: 'spare', type: 'static', value_type: 'psk' },
    { label: 'serial', type: 'static', value_type: 'string', static_value: 'SN' },
  ],
};

/** A template with two psk attributes and `n` devices built from it; returns the ids. */
export async function keyedDevices(base: string, token: string, n = 1): Promise<{ template: any; ids: string[] }> {
  const template = await createTemplate(base, token, keyed);
  const made = await createDevices(base, token, { label: 'k', templates: [template.id] }, `?count=${n}`);
  return { template, ids: made.map((d) => d.id) };
}

export const genPsk = (base: string, token: string, id: string, query: string) => http('POST', `${base}/device/gen_psk/${id}${query}`, { token });

export const copyPsk = (base: string, token: string, id: string, label: string, query: string) =>
  http('PUT', `${base}/device/${id}/attrs/${label}/psk${query}`, { token });

/** The attribute `label` of a device view (any template). */
export function attrOf(view: any, label: string): any {
  return Object.values(view.attrs as Record<string, any[]>).flat().find((a) => a.label === label);
}
