// Templates and devices shared by the device tests.
import { expect } from 'vitest';
import { http } from '../helpers/service.js';

export { TS } from '../templates/fixtures.js';

export const thermometer = {
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

export const locator = {
  label: 'Locator',
  attrs: [
    { label: 'position', type: 'dynamic', value_type: 'geopoint' },
    { label: 'vendor', type: 'static', value_type: 'string', static_value: 'acme' },
  ],
};

export async function createTemplate(base: string, token: string, body: unknown): Promise<any> {
  const res = await http('POST', `${base}/template`, { token, body });
  expect(res.status, res.text).toBe(200);
  return res.body.template;
}

/** Creates devices (count 1 by default) and returns `[{id, label}]`. */
export async function createDevices(base: string, token: string, body: unknown, query = ''): Promise<Array<{ id: string; label: string }>> {
  const res = await http('POST', `${base}/device${query}`, { token, body });
  expect(res.status, res.text).toBe(200);
  return res.body.devices;
}

export async function getDevice(base: string, token: string, id: string): Promise<any> {
  const res = await http('GET', `${base}/device/${id}`, { token });
  expect(res.status, res.text).toBe(200);
  return res.body;
}
