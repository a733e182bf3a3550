// What a shard worker knows about one device: which message keys it stores and how each value
// is checked and converted, its translators, and the device's part of a COPY row, escaped once.
// Built from the registry rows of the device (attributes of its templates without a parent,
// static values overridden per device) and kept in the worker's cache until a registry event.
import jsonPatch, { type Operation } from 'fast-json-patch';
import { seriesKey } from '../history/series.js';
import { parseTimestamp } from '../time.js';
import { converterFor, type Converter } from './values.js';
import type { DropReason } from './drop-reasons.js';
import { applyTranslators, type Translator } from './translate.js';

export interface AttrRow {
  template_id: number;
  attr_id: number | null;
  label: string | null;
  type: string | null;
  value_type: string | null;
  static_value: string | null;
}

export interface StoredAttr {
  convert: Converter;
  /** `<label>\t` escaped for COPY text. */
  column: string;
  /** Position of the attribute among the schema's stored ones (index into DeviceModel.series). */
  slot: number;
}

export interface DeviceModel {
  tenant: string;
  id: string;
  templateIds: number[];
  /** `<tenant>\t<device_id>\t` escaped for COPY text. */
  prefix: string;
  /**
   * The series key of each stored attribute by slot, computed on first use. Only the key is
   * kept (not the whole row head): measured, whole heads cost ~0.3 KB more per cached device.
   */
  series: Array<string | undefined>;
  stored: Map<string, StoredAttr>;
  translators: Translator[];
  /** The device has an attribute labelled `timestamp`: the key is a value, not the time. */
  timestampIsAttr: boolean;
}

/** Attribute types whose values are stored from messages. */
const STORED_TYPES = new Set(['dynamic', 'actuator']);
const TRANSLATOR_TYPE = 'meta-translator';
const OPS = new Set(['add', 'remove', 'replace', 'move', 'copy', 'test']);

/** COPY text format: backslash, tab, newline and carriage return are escaped. */
export function copyEscape(s: string): string {
  return /[\\\t\n\r]/.test(s)
    ? s.replace(/[\\\t\n\r]/g, (c) => (c === '\\' ? '\\\\' : c === '\t' ? '\\t' : c === '\n' ? '\\n' : '\\r'))
    : s;
}

/** The pointers fast-json-patch refuses when banning prototype modifications. */
function touchesPrototype(pointer: string): boolean {
  const keys = pointer.split('/');
  return keys.some((k, i) => k === '__proto__' || (k === 'prototype' && i > 0 && keys[i - 1] === 'constructor'));
}

/** One translator from a `meta-translator` static_value, or a reason it is unusable. */
export function parseTranslator(text: string | null): Translator | string {
  if (text === null) return 'no static_value';
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    return 'static_value is not JSON';
  }
  if (!parsed || typeof parsed !== 'object' || Array.isArray(parsed)) return 'not a JSON Patch operation object';
  const { optional, ...op } = parsed as Record<string, unknown>;
  if (typeof op.op !== 'string' || !OPS.has(op.op) || typeof op.path !== 'string') return 'not a JSON Patch operation';
  // `op` and `path` were checked just above; fast-json-patch's validate checks the rest.
  const error = jsonPatch.validate([op as unknown as Operation]);
  if (error) return `invalid JSON Patch operation: ${error.name}`;
  // Applied with prototype protection, such a path would fail on every message: unusable now.
  if ([op.path, op.from].some((p) => typeof p === 'string' && touchesPrototype(p)))
    return 'path touches __proto__ or constructor/prototype';
  return { op: op as unknown as Operation, optional: optional === true };
}

/**
 * What devices built from the same templates (and the same translator overrides) share: built
 * once and referenced by every such device, so a cache of 100,000 devices holds a handful of
 * these plus one small object per device.
 */
export type DeviceSchema = Pick<DeviceModel, 'templateIds' | 'stored' | 'translators' | 'timestampIsAttr'>;

/** Interns schemas by content; bounded (cleared when full, schemas are rebuilt on demand). */
export class SchemaPool {
  private readonly schemas = new Map<string, DeviceSchema>();
  constructor(private readonly capacity = 10_000) {}

  get size(): number {
    return this.schemas.size;
  }

  intern(signature: string, build: () => DeviceSchema): DeviceSchema {
    let schema = this.schemas.get(signature);
    if (!schema) {
      if (this.schemas.size >= this.capacity) this.schemas.clear();
      schema = build();
      this.schemas.set(signature, schema);
    }
    return schema;
  }
}

function buildSchema(rows: AttrRow[], warn?: (label: string, reason: string) => void): DeviceSchema {
  const stored = new Map<string, StoredAttr>();
  const translators: Translator[] = [];
  const templateIds = new Set<number>();
  let timestampIsAttr = false;
  for (const r of rows) {
    if (r.template_id !== null) templateIds.add(r.template_id);
    if (r.label === null || r.type === null) continue;
    if (r.label === 'timestamp') timestampIsAttr = true;
    if (STORED_TYPES.has(r.type)) {
      stored.set(r.label, { convert: converterFor(r.value_type ?? ''), column: copyEscape(r.label) + '\t', slot: stored.size });
    } else if (r.type === TRANSLATOR_TYPE) {
      const t = parseTranslator(r.static_value);
      if (typeof t === 'string') warn?.(r.label, t);
      else translators.push(t);
    }
  }
  return { templateIds: [...templateIds], stored, translators, timestampIsAttr };
}

/** Everything a device's schema depends on, as one string. */
function signature(rows: AttrRow[]): string {
  let sig = '';
  for (const r of rows) {
    sig += `${r.template_id}|${r.attr_id}|${r.label}|${r.type}|${r.value_type}|${r.type === TRANSLATOR_TYPE ? r.static_value : ''}\n`;
  }
  return sig;
}

/** Builds the model from the device's rows (ordered by attribute id); `warn` hears about unusable translators. */
export function buildDeviceModel(
  tenant: string,
  id: string,
  rows: AttrRow[],
  warn?: (label: string, reason: string) => void,
  pool?: SchemaPool,
): DeviceModel {
  const schema = pool ? pool.intern(tenant + '\n' + signature(rows), () => buildSchema(rows, warn)) : buildSchema(rows, warn);
  return {
    tenant,
    id,
    prefix: copyEscape(tenant) + '\t' + copyEscape(id) + '\t',
    series: new Array<string | undefined>(schema.stored.size),
    templateIds: schema.templateIds,
    stored: schema.stored,
    translators: schema.translators,
    timestampIsAttr: schema.timestampIsAttr,
  };
}

export interface MessageOutcome {
  /** COPY text lines, one per stored value. */
  rows: string[];
  /** Message-level drop (the whole message), if any. */
  dropped?: DropReason;
  /** Value-level drops. */
  unknownKeys: number;
  /** The `timestamp` key was neither epoch ms nor ISO 8601 (ignored: the receive time applies). */
  badTimestamp?: boolean;
  wrongTypes: number;
  /** Keys of the message after translation (values received). */
  values: number;
  /** The time of the stored values (µs since the epoch). */
  us: number;
  /** The stored values as a JSON object text (`{"label":value,...}`), for the live stream; undefined if none. */
  attrs?: string;
}

/**
 * Validates one message of a device and renders its stored values as COPY lines
 * (`tenant \t device_id \t attr \t series \t ts \t value`). `receivedUs` is the receive time (µs).
 * `tsText` renders microseconds as timestamptz text (cached by the caller).
 */
export function renderMessage(
  model: DeviceModel,
  payload: string,
  receivedUs: number,
  tsText: (us: number) => string,
  out: string[],
): MessageOutcome {
  const outcome: MessageOutcome = { rows: out, unknownKeys: 0, wrongTypes: 0, values: 0, us: receivedUs };
  const obj = translatedObject(model, payload, outcome);
  if (obj) renderValues(model, obj, messageTime(model, obj, outcome), tsText, out, outcome);
  return outcome;
}

/** The message as a JSON object after the device's translators; undefined if it is dropped (outcome.dropped says why). */
function translatedObject(model: DeviceModel, payload: string, outcome: MessageOutcome): Record<string, unknown> | undefined {
  let doc: unknown;
  try {
    doc = JSON.parse(payload);
  } catch {
    outcome.dropped = 'not_json';
    return undefined;
  }
  if (doc === null || typeof doc !== 'object' || Array.isArray(doc)) {
    outcome.dropped = 'not_object';
    return undefined;
  }
  if (model.translators.length > 0) {
    doc = applyTranslators(doc, model.translators, payload.length);
    if (doc === undefined) {
      outcome.dropped = 'translation_failed';
      return undefined;
    }
  }
  if (doc === null || typeof doc !== 'object' || Array.isArray(doc)) {
    outcome.dropped = 'not_object';
    return undefined;
  }
  return doc as Record<string, unknown>;
}

/** The time of the message's values (µs): its `timestamp` key, else the receive time (outcome.us). */
function messageTime(model: DeviceModel, obj: Record<string, unknown>, outcome: MessageOutcome): number {
  if (!model.timestampIsAttr && Object.prototype.hasOwnProperty.call(obj, 'timestamp')) {
    // A timestamp that is neither epoch ms nor ISO 8601 is no timestamp: the values keep the
    // receive time (decisions.md: "otherwise ts is the receive time"); the key is counted.
    const parsed = parseTimestamp(obj.timestamp);
    if (parsed === undefined) outcome.badTimestamp = true;
    else outcome.us = parsed;
  }
  return outcome.us;
}

/** One COPY line per key that is a stored attribute of the device and whose value fits its type; the rest counted. */
function renderValues(
  model: DeviceModel,
  obj: Record<string, unknown>,
  us: number,
  tsText: (us: number) => string,
  out: string[],
  outcome: MessageOutcome,
): void {
  let ts: string | undefined;
  for (const key of Object.keys(obj)) {
    if (key === 'timestamp' && !model.timestampIsAttr) continue;
    outcome.values++;
    const attr = model.stored.get(key);
    if (!attr) {
      outcome.unknownKeys++;
      continue;
    }
    const json = attr.convert(obj[key]);
    if (json === undefined) {
      outcome.wrongTypes++;
      continue;
    }
    ts ??= tsText(us) + '\t';
    outcome.attrs = (outcome.attrs === undefined ? '{' : outcome.attrs + ',') + JSON.stringify(key) + ':' + json;
    const series = (model.series[attr.slot] ??= seriesKey(model.tenant, model.id, key));
    out.push(model.prefix + attr.column + series + '\t' + ts + (json.includes('\\') ? json.replace(/\\/g, '\\\\') : json) + '\n');
  }
  if (outcome.attrs !== undefined) outcome.attrs += '}';
}
