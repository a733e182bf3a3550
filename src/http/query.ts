// Validated query values (each route's query schema, checked before the handler runs) turned
// into what the services take: pages, list filters, label lists (decisions.md "Common"); and
// the pagination of an answer.
import type { ListFilters, Page } from '../registry/paging.js';
import type { QueryValues } from '../schemas/validator.js';

export interface Pagination {
  page: number;
  total: number;
  has_next: boolean;
  next_page: number | null;
}

/** page_num / page_size (defaults 1 and 20; their checks, in the contract's order, are the schema's). */
export function pageOf(q: QueryValues): Page {
  const num = q.page_num as number;
  const size = q.page_size as number;
  // A page far past the end is just empty; keep the offset a safe integer for the SQL.
  return { num, size, offset: Math.min((num - 1) * size, Number.MAX_SAFE_INTEGER) };
}

/** `total` is the number of pages. */
export function pagination(page: Page, matches: number): Pagination {
  const total = Math.ceil(matches / page.size);
  const hasNext = page.num < total;
  return { page: page.num, total, has_next: hasNext, next_page: hasNext ? page.num + 1 : null };
}

/** label / attr (each has a `=`, checked by the schema) / attr_type / sortBy. */
export function listFiltersOf(q: QueryValues): ListFilters {
  // A filter given twice is the same condition: kept once.
  const attrs = [...new Set((q.attr as string[] | undefined) ?? [])].map((f) => {
    const i = f.indexOf('=');
    return { label: f.slice(0, i), value: f.slice(i + 1) };
  });
  const label = q.label as string | undefined;
  return {
    label: label === undefined || label === '' ? undefined : label,
    attrs,
    // Kept even when empty: `attr_type=` asks for a type equal to "", which no attribute has.
    attrTypes: [...new Set((q.attr_type as string[] | undefined) ?? [])],
    sortByLabel: q.sortBy === 'label',
  };
}

/** Comma-separated label lists (`attrs=a, b`, repeatable): trimmed, empty ones dropped; none: undefined. */
export function labelListOf(raw: unknown): string[] | undefined {
  const values = Array.isArray(raw) ? raw : typeof raw === 'string' ? [raw] : [];
  const labels = values
    .flatMap((v: string) => v.split(','))
    .map((l) => l.trim())
    .filter((l) => l !== '');
  return labels.length > 0 ? labels : undefined;
}

/**
 * The first of a query's parameter `names` not among `known`, or undefined: for routes where a
 * misspelt parameter would silently widen the answer (an export, a live stream), refused rather
 * than ignored.
 */
export function unknownParameter(names: Iterable<string>, known: ReadonlySet<string>): string | undefined {
  for (const name of names) if (!known.has(name)) return name;
  return undefined;
}
