// Parsing of device requests (decisions.md "Devices"): count, verbose, the body and its
// override list. Pure functions: they throw the contract's errors and touch nothing.
import { errors } from '../../errors.js';
import { parseFlag } from '../../http/query.js';
import { validate } from '../../schemas/validator.js';
import type { CreateOptions, DeviceInput, OverrideInput } from './types.js';

const DEVICE_ID = /^[0-9a-fA-F]{2,6}$/;

/** `count` (integer >= 1, at most `max`) and `verbose` (single creation only). */
export function parseCreateOptions(q: URLSearchParams, max: number): CreateOptions {
  const raw = q.get('count');
  let count = 1;
  if (raw !== null) {
    if (!/^\d+$/.test(raw.trim())) throw errors.countNotInteger();
    count = Number(raw.trim());
    if (count < 1) throw errors.countNotInteger();
    if (count > max) throw errors.countTooLarge(max);
  }
  const verbose = parseFlag(q, 'verbose');
  if (verbose && count > 1) throw errors.verboseWithCount();
  return { count, verbose };
}

type Scalar = string | number | boolean;

interface RawOverride {
  id?: number | string;
  template_id?: number | string;
  label?: string;
  static_value?: Scalar;
  metadata?: Array<{ id: number | string; static_value?: Scalar }>;
}

interface RawBody {
  label: string;
  templates: Array<number | string>;
  id?: unknown;
  attrs?: RawOverride[];
}

const text = (v: Scalar | undefined) => (v === undefined ? undefined : String(v));

/** A POST/PUT /device body; `withId`: the optional client-chosen id is read (POST). */
export function parseDeviceBody(body: unknown, withId: boolean): DeviceInput {
  const b = validate<RawBody>('devices.body', body);
  let id: string | undefined;
  if (withId && b.id !== undefined && b.id !== null) {
    if (typeof b.id !== 'string' || !DEVICE_ID.test(b.id)) throw errors.badDeviceId();
    id = b.id;
  }
  const overrides: OverrideInput[] = [];
  const labels = new Set<string>();
  for (const o of b.attrs ?? []) {
    if (o.label === undefined) throw errors.missingOverrideLabel();
    if (labels.has(o.label)) throw errors.repeatedAttributes();
    labels.add(o.label);
    overrides.push({
      id: o.id === undefined ? undefined : String(o.id),
      templateId: o.template_id === undefined ? undefined : String(o.template_id),
      label: o.label,
      staticValue: text(o.static_value),
      metadata: (o.metadata ?? []).map((m) => ({ id: String(m.id), staticValue: text(m.static_value) })),
    });
  }
  return { label: b.label, templates: [...new Set(b.templates.map(String))], id, overrides };
}
