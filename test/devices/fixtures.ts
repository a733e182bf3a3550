// Templates shared by the device tests.
import type { TemplateBodyWithAttrs } from '../helpers/api.js';

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
