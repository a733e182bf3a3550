import type { AttrRecord } from '../attrs.js';
import type { ListFilters } from '../paging.js';

/** One entry of the override list, as given (ids still as the client wrote them). */
export interface OverrideInput {
  id: string | undefined;
  templateId: string | undefined;
  label: string;
  staticValue: string | undefined;
  metadata: Array<{ id: string; staticValue: string | undefined }>;
}

/** A validated POST/PUT /device body. */
export interface DeviceInput {
  label: string;
  /** Template ids as given (deduplicated, in order), for the error messages. */
  templates: string[];
  /** A client-chosen id (POST only). */
  id: string | undefined;
  overrides: OverrideInput[];
}

export interface CreateOptions {
  count: number;
  verbose: boolean;
}

/** A device as stored, with its templates (ascending id) and their attributes. */
export interface DeviceRecord {
  id: string;
  label: string;
  created: string;
  updated: string | null;
  templates: Array<{ id: number; attrs: AttrRecord[] }>;
}

/** A device's own static value for an attribute or metadata entry. */
export interface OverrideRow {
  attrId: number;
  value: string;
}

/** What a create or update request makes of a device: label, templates (checked) and overrides. */
export interface DeviceShape {
  label: string;
  templates: number[];
  overrides: OverrideRow[];
}

/** Which devices a list request wants. */
export interface DeviceQuery {
  filters: ListFilters;
  /** Only devices built from this template (GET /device/template/{id}). */
  templateId?: number;
  /**
   * Only devices with this status (GET /device?status=); the service fills in the default timeout
   * and its clock (µs), the one its views judge by, not the database's.
   */
  status?: { online: boolean; offlineAfterSeconds: number; nowUs: number };
  /** Views with `last_seen` and `status` (`withStatus`, or a status filter). */
  withStatus?: boolean;
}
