// Template bodies and helpers shared by the template (and device) tests.
import { expect } from 'vitest';
import { http } from '../helpers/service.js';

export const TS = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}\+00:00$/;

export const sensorBody = () => ({
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

/** Creates a template and returns the created template (id is an integer). */
export async function createTemplate(base: string, token: string, body: unknown = sensorBody()): Promise<any> {
  const res = await http('POST', `${base}/template`, { token, body });
  expect(res.status, res.text).toBe(200);
  return res.body.template;
}

export const labelsOf = (list: Array<{ label: string }>) => list.map((x) => x.label);
