// The fixture the routes' examples are written against; the example test builds it in a fresh
// tenant (test/openapi/examples.test.ts, docs/api.md): template 1 "Thermometer" (temperature:
// dynamic float; serial: static string "SN-0" with metadata unit "C"; led: actuator bool; key
// and spare: static psk), device a1b2c3 (from template 1, a generated key on `key`, two
// temperature values in its history, credential CREDENTIAL_ID), device d4e5f6 (no templates,
// no credentials). Template id 1 stands for the
// fixture template's id. Ids 999999 and ffffff name nothing.
import { errors, type ErrorKey } from '../errors.js';
import { PAGE_ERRORS } from '../schemas/queries.js';

/** The body of an error, as an example answer. */
export const err = (key: ErrorKey, ...args: unknown[]) => (errors[key] as (...a: unknown[]) => { body: unknown })(...args).body;

export const T = 1;
export const DEV = 'a1b2c3';
export const TIME = '2026-05-01T12:00:00.000000+00:00';
export const KEY = '3f9a0c47e1b25d68a4c3f1e09b7d2a55';
/** The credential of a1b2c3 (its secret logs nothing in). */
export const CREDENTIAL_ID = '6f1c2a8e-3b4d-4e5f-8a9b-0c1d2e3f4a5b';

const attr = (id: number, label: string, type: string, valueType: string, extra: Record<string, unknown> = {}) => ({
  id,
  label,
  type,
  value_type: valueType,
  ...(extra.static_value !== undefined ? { static_value: extra.static_value } : {}),
  ...(extra.is_static_overridden !== undefined ? { is_static_overridden: extra.is_static_overridden } : {}),
  template_id: String(T),
  created: TIME,
  ...(extra.metadata ? { metadata: extra.metadata } : {}),
});
const unit = (device: boolean) => ({
  id: 3,
  label: 'unit',
  type: 'static',
  value_type: 'string',
  static_value: 'C',
  ...(device ? { is_static_overridden: false } : {}),
  created: TIME,
});
export const templateAttrs = [
  attr(1, 'temperature', 'dynamic', 'float'),
  attr(2, 'serial', 'static', 'string', { static_value: 'SN-0', metadata: [unit(false)] }),
  attr(4, 'led', 'actuator', 'bool'),
  attr(5, 'key', 'static', 'psk'),
  attr(6, 'spare', 'static', 'psk'),
];
export const deviceAttrs = (key?: string) => [
  attr(1, 'temperature', 'dynamic', 'float'),
  attr(2, 'serial', 'static', 'string', { static_value: 'SN-0', is_static_overridden: false, metadata: [unit(true)] }),
  attr(4, 'led', 'actuator', 'bool'),
  key ? attr(5, 'key', 'static', 'psk', { static_value: key, is_static_overridden: true }) : attr(5, 'key', 'static', 'psk'),
  attr(6, 'spare', 'static', 'psk'),
];
export const templateBoth = (id: number | string = T, label = 'Thermometer') => ({
  id,
  label,
  created: TIME,
  attrs: templateAttrs,
  data_attrs: templateAttrs,
  config_attrs: [],
});
// a1b2c3 has had a key generated: it shows `updated`.
export const device = (id = DEV, label = 'sensor_0', key?: string) => ({
  id,
  label,
  created: TIME,
  ...(id === DEV ? { updated: TIME } : {}),
  templates: [String(T)],
  attrs: { [String(T)]: deviceAttrs(key) },
});
export const bareDevice = { id: 'd4e5f6', label: 'bare_0', created: TIME, templates: [], attrs: {} };
export const thermometerBody = {
  label: 'Thermometer',
  attrs: [
    { label: 'temperature', type: 'dynamic', value_type: 'float' },
    {
      label: 'serial',
      type: 'static',
      value_type: 'string',
      static_value: 'SN-0',
      metadata: [{ label: 'unit', type: 'static', value_type: 'string', static_value: 'C' }],
    },
    { label: 'led', type: 'actuator', value_type: 'bool' },
    { label: 'key', type: 'static', value_type: 'psk' },
    { label: 'spare', type: 'static', value_type: 'psk' },
  ],
};
export const page1 = { page: 1, total: 1, has_next: false, next_page: null };

/** The 400 errors of the list routes, in their check order. */
export const LIST_ERRORS: ErrorKey[] = [...PAGE_ERRORS, 'attrFilterWithoutValue'];
/** The 400 errors of a body that is not JSON or fails its schema. */
export const BODY_ERRORS: ErrorKey[] = ['validation', 'payloadNotJson'];
