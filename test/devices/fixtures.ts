// Templates and queries shared by the device tests.
import { expect } from 'vitest';
import type { TemplateBodyWithAttrs } from '../helpers/api.js';
import { http } from '../helpers/service.js';

export { TS } from '../templates/fixtures.js';

export const thermometer: TemplateBodyWithAttrs = {
  label: 'Thermometer',
  attrs: [
    { label: 'temperature', type: 'dynamic', value_type: 'float' },
    {
      label: 'serial',
      type: 'static',
      value_type: 'string',
      static_value: 'undefined',
      metadata: [{ label: 'unit', type: 'static', value_type: 'string', static_value: 'none' }],
    },
    { label: 'led', type: 'actuator', value_type: 'bool' },
  ],
};

export const locator: TemplateBodyWithAttrs = {
  label: 'Locator',
  attrs: [
    { label: 'position', type: 'dynamic', value_type: 'geopoint' },
    { label: 'vendor', type: 'static', value_type: 'string', static_value: 'acme' },
  ],
};

/** A template of three attributes (dynamic, static, actuator), for the tests of device routes at their edges. */
export const sensor = (): TemplateBodyWithAttrs => ({
  label: 'Sensor',
  attrs: [
    { label: 'temperature', type: 'dynamic', value_type: 'float' },
    { label: 'serial', type: 'static', value_type: 'string', static_value: 'SN-0' },
    { label: 'led', type: 'actuator', value_type: 'bool' },
  ],
});

/** The keys of a device view never changed by PUT, gen_psk or a key copy (no `updated`). */
export const VIEW_KEYS = ['id', 'label', 'created', 'templates', 'attrs'];

export const NOT_JSON = { message: 'Payload must be valid JSON, and Content-Type set accordingly', status: 400 };

/** The caller's devices as GET /device?idsOnly answers them, over `svc`'s public API. */
export function deviceQueries(svc: { readonly base: string }) {
  /** Every id of the caller's tenant that a GET /device query selects, in the order it answers. */
  async function idsOf(token: string, query = ''): Promise<string[]> {
    const res = await http<string[]>('GET', `${svc.base}/device?idsOnly${query ? `&${query}` : ''}`, { token });
    expect(res.status, res.text).toBe(200);
    return res.body;
  }
  return { idsOf, deviceCount: async (token: string) => (await idsOf(token)).length };
}
