// Device JSON shapes (interface.md §2.3, decisions.md "Devices").
import { attrView } from '../attrs.js';
import type { DeviceRecord } from './types.js';

/**
 * `templates` as strings; `attrs` keyed by template id (integer-like keys keep ascending order
 * in JSON). `internal`: a generated key shows as its attribute's static_value.
 */
export function deviceView(d: DeviceRecord, mode: 'device' | 'internal' = 'device'): Record<string, unknown> {
  const v: Record<string, unknown> = { id: d.id, label: d.label, created: d.created };
  if (d.updated !== null) v.updated = d.updated;
  v.templates = d.templates.map((t) => String(t.id));
  const attrs: Record<string, unknown> = {};
  for (const t of d.templates) attrs[String(t.id)] = t.attrs.map((a) => attrView(a, mode));
  v.attrs = attrs;
  return v;
}
