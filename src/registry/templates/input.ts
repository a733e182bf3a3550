// Parsing of template bodies (decisions.md "Templates"): the body, then each attribute with
// its own message, then repeated labels. Pure functions: they throw the contract's errors.
import { errors } from '../../errors.js';
import { templateAttrBody, templateBody } from '../../schemas/templates.js';
import { check, validate } from '../../schemas/validator.js';
import type { AttrInput, TemplateInput } from './types.js';

interface RawAttr {
  label: string;
  type: string;
  value_type: string;
  static_value?: string | number | boolean;
  metadata?: RawAttr[];
}

const asText = (v: string | number | boolean | undefined): string | null => (v === undefined ? null : String(v));

function repeated(labels: string[]): string | undefined {
  const seen = new Set<string>();
  for (const l of labels) {
    if (seen.has(l)) return l;
    seen.add(l);
  }
  return undefined;
}

/** One attribute of a template body: 400 `failed to parse attr` with its field errors (schema `templateAttrBody`). */
function parseAttr(raw: unknown): AttrInput {
  const errs = check(templateAttrBody, raw);
  if (errs) throw errors.validation(errs, 'failed to parse attr');
  const valid = raw as RawAttr;
  const metadata = valid.metadata ?? [];
  const dup = repeated(metadata.map((m) => m.label));
  if (dup !== undefined) throw errors.validation({ metadata: [`Repeated metadata label: ${dup}`] }, 'failed to parse attr');
  return {
    label: valid.label,
    type: valid.type,
    valueType: valid.value_type,
    staticValue: asText(valid.static_value),
    metadata: metadata.map((m) => ({
      label: m.label,
      type: m.type,
      valueType: m.value_type,
      staticValue: asText(m.static_value),
      metadata: [],
    })),
  };
}

/** A POST/PUT /template body. */
export function parseTemplateInput(body: unknown): TemplateInput {
  const b = validate<{ label: string; attrs?: unknown[]; offline_after?: number | null }>(templateBody, body);
  const attrs = (b.attrs ?? []).map(parseAttr);
  const dup = repeated(attrs.map((a) => a.label));
  if (dup !== undefined) throw errors.validation({ label: [`Repeated attribute label: ${dup}`] }, 'failed to parse attr');
  return { label: b.label, attrs, offlineAfter: b.offline_after ?? null };
}
