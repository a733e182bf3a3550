import type { AttrRecord } from '../attrs.js';

/** A validated attribute of a POST/PUT /template body (static_value already as text). */
export interface AttrInput {
  label: string;
  type: string;
  valueType: string;
  staticValue: string | null;
  metadata: AttrInput[];
}

export interface TemplateInput {
  label: string;
  attrs: AttrInput[];
  /** Seconds without a stored message after which its devices are offline; null: the service's default. */
  offlineAfter: number | null;
}

/** A template as stored, attributes in id order with their metadata nested. */
export interface TemplateRecord {
  id: number;
  label: string;
  created: string;
  updated: string | null;
  offlineAfter: number | null;
  attrs: AttrRecord[];
}

/** `both` (default, also for unknown values), `single` (only attrs), `split` (only data/config). */
export type AttrFormat = 'both' | 'single' | 'split';

/** One template_attrs row to insert. */
export interface NewAttrRow {
  id: number;
  parentId: number | null;
  label: string;
  type: string;
  valueType: string;
  staticValue: string | null;
}

/** A kept attribute's new contents. */
export interface AttrChange {
  id: number;
  valueType: string;
  staticValue: string | null;
}
