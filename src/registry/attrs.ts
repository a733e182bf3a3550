// Attributes as stored (template_attrs rows, metadata nested under their attribute) and their
// JSON views, shared by the template and device endpoints (decisions.md "Templates", "Devices").
import { registryTimeSql } from '../time.js';

export interface AttrRecord {
  id: number;
  templateId: number;
  label: string;
  type: string;
  valueType: string;
  staticValue: string | null;
  created: string;
  updated: string | null;
  /** The device's own value (device views only). */
  override?: string | null;
  /** The device's generated key, decrypted (internal device views only). */
  key?: string;
  metadata: AttrRecord[];
}

/** The attribute columns every registry query selects, from `template_attrs a`. */
export const ATTR_COLUMNS = [
  'a.id AS a_id',
  'a.template_id AS a_template',
  'a.parent_id AS a_parent',
  'a.label AS a_label',
  'a.type AS a_type',
  'a.value_type AS a_value_type',
  'a.static_value AS a_static',
  `${registryTimeSql('a.created')} AS a_created`,
  `${registryTimeSql('a.updated')} AS a_updated`,
].join(', ');

export interface AttrColumns {
  a_id: number | null;
  a_template: number | null;
  a_parent: number | null;
  a_label: string | null;
  a_type: string | null;
  a_value_type: string | null;
  a_static: string | null;
  a_created: string | null;
  a_updated: string | null;
}

export function attrFromRow(r: AttrColumns): AttrRecord {
  return {
    id: r.a_id!,
    templateId: r.a_template!,
    label: r.a_label!,
    type: r.a_type!,
    valueType: r.a_value_type!,
    staticValue: r.a_static,
    created: r.a_created!,
    updated: r.a_updated,
    metadata: [],
  };
}

/**
 * Nests metadata under their attributes. `rows` come in attribute id order, so both levels
 * keep it; a metadata entry whose parent is not in `rows` is dropped.
 */
export function nestAttrs<R extends AttrColumns>(rows: R[], make: (r: R) => AttrRecord = attrFromRow): AttrRecord[] {
  const top: AttrRecord[] = [];
  const byId = new Map<number, AttrRecord>();
  const children: Array<[number, AttrRecord]> = [];
  for (const r of rows) {
    if (r.a_id === null) continue;
    const a = make(r);
    if (r.a_parent === null) {
      top.push(a);
      byId.set(a.id, a);
    } else {
      children.push([r.a_parent, a]);
    }
  }
  for (const [parent, m] of children) byId.get(parent)?.metadata.push(m);
  return top;
}

export const DATA_TYPES: ReadonlySet<string> = new Set(['dynamic', 'static', 'actuator']);

export interface AttrView {
  id: number;
  label: string;
  type: string;
  value_type: string;
  static_value?: string;
  is_static_overridden?: boolean;
  template_id?: string;
  created: string;
  updated?: string;
  metadata?: AttrView[];
}

export type AttrViewMode =
  /** Template views: the template's values. */
  | 'template'
  /** Public device views: the device's override wins; keys never shown. */
  | 'device'
  /** Internal device views: as `device`, and a generated key is the static_value. */
  | 'internal';

/** One attribute (or metadata entry, `nested`: no template_id) as the API shows it. */
export function attrView(a: AttrRecord, mode: AttrViewMode, nested = false): AttrView {
  // Keys are added in the order the views show them.
  const v = { id: a.id, label: a.label, type: a.type, value_type: a.valueType } as AttrView;
  if (mode === 'template') {
    if (a.staticValue !== null) v.static_value = a.staticValue;
  } else {
    // A psk attribute's value in a device is its key: shown only by the internal views, and only
    // a generated (or copied) one, never a template's static_value standing in for it.
    const psk = a.valueType === 'psk';
    const own = psk ? (mode === 'internal' ? a.key : undefined) : a.override;
    const value = psk ? own : (own ?? a.staticValue);
    if (value !== null && value !== undefined) {
      v.static_value = value;
      v.is_static_overridden = own !== null && own !== undefined;
    }
  }
  if (!nested) v.template_id = String(a.templateId);
  v.created = a.created;
  if (a.updated !== null) v.updated = a.updated;
  if (a.metadata.length > 0) v.metadata = a.metadata.map((m) => attrView(m, mode, true));
  return v;
}
