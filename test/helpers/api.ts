// The JSON the API answers with and the bodies the tests send, as the tests read them
// (interface.md §2, §4, §7; decisions.md). The service declares the attribute view (AttrView);
// the other views it builds as plain objects, so their shapes are written here from the contract.
// `http<T>()` (service.ts) casts a body to one of these; the assertions check it. Timestamps are
// text: `created` / `updated` as `TS` (registry time).
import type { AttrView } from '../../src/registry/attrs.js';

/**
 * An attribute (or, without `template_id`, a metadata entry) of a template or device view: the
 * service's own declaration of the view, which the tests hold it to.
 */
export type { AttrView };

/** A template with attr_format `both` (the default). `Id` is a string in update/delete answers. */
export interface TemplateView<Id extends number | string = number> {
  id: Id;
  label: string;
  created: string;
  updated?: string;
  attrs: AttrView[];
  data_attrs: AttrView[];
  config_attrs: AttrView[];
}

/** A template with attr_format `single` (only `attrs`) or `split` (only the two others). */
export type TemplateInFormat = Omit<TemplateView, 'attrs' | 'data_attrs' | 'config_attrs'> &
  Partial<Pick<TemplateView, 'attrs' | 'data_attrs' | 'config_attrs'>>;

export interface DeviceView {
  id: string;
  label: string;
  created: string;
  updated?: string;
  /** Template ids as strings. */
  templates: string[];
  /** Template id -> the attributes from that template. */
  attrs: Record<string, AttrView[]>;
}

/** A device as POST /device answers it without `verbose`. */
export interface DeviceRef {
  id: string;
  label: string;
}

export interface Pagination {
  page: number;
  total: number;
  has_next: boolean;
  next_page: number | null;
}

export interface TemplateList<T = TemplateView> {
  templates: T[];
  pagination: Pagination;
}

export interface DeviceList {
  devices: DeviceView[];
  pagination: Pagination;
}

export interface TemplateCreated {
  result: 'ok';
  template: TemplateView;
}

export interface TemplateUpdated {
  updated: TemplateView<string>;
  result: 'ok';
}

export interface TemplateRemoved {
  removed: TemplateView<string>;
  result: 'ok';
}

export interface TemplatesRemoved {
  removed: Array<TemplateView<string>>;
  result: 'ok';
}

/** `D` is `DeviceView` with `verbose` (message `device created`). */
export interface DevicesCreated<D = DeviceRef> {
  message: string;
  devices: D[];
}

export interface DeviceUpdated {
  message: string;
  device: DeviceView;
}

export interface DeviceRemoved {
  removed_device: DeviceView;
  result: 'ok';
}

export interface DevicesRemoved {
  removed_devices: DeviceView[];
  result: 'ok';
}

/** One generated pre-shared key (POST /device/gen_psk/{id}). */
export interface KeyRecord {
  attribute: string;
  psk: string;
}

export interface HistoryRecord {
  device_id: string;
  ts: string;
  /** As the device sent it (its JSON type kept). */
  value: unknown;
  attr: string;
}

/** Several `attr` labels (or none): label -> records. */
export type HistoryByLabel = Record<string, HistoryRecord[]>;

/** Most errors: `message` is a list for the repeated-attributes error; `status` mostly the HTTP status. */
export interface ErrorBody {
  message: string | string[];
  status: number;
}

export interface TokenAnswer {
  jwt: string;
}

export interface UserAnswer {
  id: number;
  username: string;
  service: string;
  profile: string;
  created: string;
}

/** An attribute of a POST/PUT /template body. */
export interface AttrBody {
  label: string;
  type: string;
  value_type: string;
  static_value?: string;
  metadata?: AttrBody[];
}

export interface TemplateBody {
  label: string;
  attrs?: AttrBody[];
}

/** A template body with its attribute list (the fixtures): `attrs` can be edited in place. */
export interface TemplateBodyWithAttrs extends TemplateBody {
  attrs: AttrBody[];
}

/** One entry of a device's override list (`attrs` of a POST/PUT /device body). */
export interface OverrideBody {
  id?: number;
  template_id?: string;
  label: string;
  static_value?: string;
  metadata?: Array<{ id: number; static_value: string }>;
}

export interface DeviceBody {
  id?: string;
  label: string;
  templates: Array<number | string>;
  attrs?: OverrideBody[];
}

/** GET /health/ready (src/health.ts): `ok` or what is wrong, per check; the reasons when not ready. */
export interface ReadinessAnswer {
  status: 'ready' | 'not ready';
  checks: Record<'database' | 'migrations' | 'broker' | 'ingest', string>;
  reasons?: string[];
}

/** A device credential's metadata (GET /device/{id}/credentials), never its secret. */
export interface CredentialView {
  id: string;
  type: 'password';
  created_at: string;
  expires_at: string | null;
  last_used_at: string | null;
}

/** POST /device/{id}/credentials: the metadata and, this once, the secret. */
export interface CredentialCreated extends Omit<CredentialView, 'last_used_at'> {
  secret: string;
}
