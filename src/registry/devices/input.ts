// Parsing of device requests (decisions.md "Devices"): the create options and the body with
// its override list. Pure functions: they throw the contract's errors and touch nothing.
import { errors } from '../../errors.js';
import { deviceCreateBody, deviceUpdateBody } from '../../schemas/devices.js';
import { validate, type QueryValues } from '../../schemas/validator.js';
import type { CreateOptions, DeviceInput, OverrideInput } from './types.js';

/** `count` and `verbose`, validated by the query schema of POST /device; verbose is for single creation only. */
export function createOptions(q: QueryValues): CreateOptions {
  const count = q.count as number;
  const verbose = q.verbose as boolean;
  if (verbose && count > 1) throw errors.verboseWithCount();
  return { count, verbose };
}

type Scalar = string | number | boolean;

interface RawOverride {
  id?: number | string;
  template_id?: number | string;
  label: string;
  static_value?: Scalar;
  metadata?: Array<{ id: number | string; static_value?: Scalar }>;
}

interface RawBody {
  label: string;
  templates: Array<number | string>;
  id?: string | null;
  attrs?: RawOverride[];
}

const text = (v: Scalar | undefined) => (v === undefined ? undefined : String(v));

/** An id as text; a `+` before its digits is only a sign (`"+5"` is 5, as `"05"` is). */
const idText = (v: number | string) => String(v).replace(/^\+(?=[0-9]+$)/, '');

/** A POST/PUT /device body; `withId`: the optional client-chosen id is read (POST). */
export function parseDeviceBody(body: unknown, withId: boolean): DeviceInput {
  // The schemas check `id` (POST only) and that every override has a label.
  const b = validate<RawBody>(withId ? deviceCreateBody : deviceUpdateBody, body);
  const id = withId && typeof b.id === 'string' ? b.id : undefined;
  const overrides: OverrideInput[] = [];
  const labels = new Set<string>();
  for (const o of b.attrs ?? []) {
    if (labels.has(o.label)) throw errors.repeatedAttributes();
    labels.add(o.label);
    overrides.push({
      id: o.id === undefined ? undefined : idText(o.id),
      templateId: o.template_id === undefined ? undefined : idText(o.template_id),
      label: o.label,
      staticValue: text(o.static_value),
      metadata: (o.metadata ?? []).map((m) => ({ id: idText(m.id), staticValue: text(m.static_value) })),
    });
  }
  return { label: b.label, templates: [...new Set(b.templates.map(idText))], id, overrides };
}
