// Template bodies shared by the template (and device) tests.
import type { TemplateBodyWithAttrs } from '../helpers/api.js';

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
