// Template JSON shapes (interface.md §2.2, decisions.md "Templates").
import { attrView, DATA_TYPES } from '../attrs.js';
import type { AttrFormat, TemplateRecord } from './types.js';

/** `id` is an integer in create/get/list responses and a string in update/delete responses. */
export function templateView(t: TemplateRecord, format: AttrFormat = 'both', idAsString = false): Record<string, unknown> {
  const v: Record<string, unknown> = { id: idAsString ? String(t.id) : t.id, label: t.label, created: t.created };
  if (t.updated !== null) v.updated = t.updated;
  const attrs = t.attrs.map((a) => attrView(a, 'template'));
  if (format !== 'split') v.attrs = attrs;
  if (format !== 'single') {
    v.data_attrs = attrs.filter((a) => DATA_TYPES.has(a.type));
    v.config_attrs = attrs.filter((a) => !DATA_TYPES.has(a.type));
  }
  return v;
}
