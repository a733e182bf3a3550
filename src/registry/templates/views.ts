// Template JSON shapes (interface.md §2.2, decisions.md "Templates").
import { attrView, DATA_TYPES } from '../attrs.js';
import type { AttrFormat, TemplateRecord } from './types.js';

/** `id` is an integer in create/get/list responses and a string in update/delete responses. */
export function templateView(t: TemplateRecord, format: AttrFormat = 'both', idAsString = false): Record<string, unknown> {
  const v: Record<string, unknown> = { id: idAsString ? String(t.id) : t.id, label: t.label, created: t.created };
  if (t.updated !== null) v.updated = t.updated;
  // Shown only when set: templates without it answer exactly as before.
  if (t.offlineAfter !== null) v.offline_after = t.offlineAfter;
  const attrs = t.attrs.map((a) => attrView(a, 'template'));
  if (format !== 'split') v.attrs = attrs;
  if (format !== 'single') {
    v.data_attrs = attrs.filter((a) => DATA_TYPES.has(a.type));
    v.config_attrs = attrs.filter((a) => !DATA_TYPES.has(a.type));
  }
  return v;
}

/** A template's list/get view as JSON pieces, put together per `attr_format` without serialising again. */
export interface TemplateJson {
  /** `{"id":..,"label":..,"created":..[,"updated":..]` without the closing brace. */
  head: string;
  attrs: string;
  dataAttrs: string;
  configAttrs: string;
}

export function templateJson(t: TemplateRecord): TemplateJson {
  const { attrs, data_attrs: dataAttrs, config_attrs: configAttrs, ...head } = templateView(t, 'both');
  return {
    head: JSON.stringify(head).slice(0, -1),
    attrs: JSON.stringify(attrs),
    dataAttrs: JSON.stringify(dataAttrs),
    configAttrs: JSON.stringify(configAttrs),
  };
}

/** The same text as `JSON.stringify(templateView(t, format))`. */
export function templateText(j: TemplateJson, format: AttrFormat = 'both'): string {
  let s = j.head;
  if (format !== 'split') s += `,"attrs":${j.attrs}`;
  if (format !== 'single') s += `,"data_attrs":${j.dataAttrs},"config_attrs":${j.configAttrs}`;
  return `${s}}`;
}
