// Query parameters shared by the list endpoints: pagination (checked in the contract's order)
// and the label / attr / attr_type / sortBy filters (decisions.md "Common").
import { errors } from '../errors.js';

export interface Page {
  num: number;
  size: number;
  offset: number;
}

export interface Pagination {
  page: number;
  total: number;
  has_next: boolean;
  next_page: number | null;
}

const INTEGER = /^[+-]?\d+$/;

/** page_num / page_size: not integers, then page_num < 1, then page_size < 1, then the maximum. */
export function parsePage(q: URLSearchParams, maxPageSize: number): Page {
  const rawNum = q.get('page_num');
  const rawSize = q.get('page_size');
  if ((rawNum !== null && !INTEGER.test(rawNum.trim())) || (rawSize !== null && !INTEGER.test(rawSize.trim()))) {
    throw errors.pagingNotIntegers();
  }
  const num = rawNum === null ? 1 : Number(rawNum);
  const size = rawSize === null ? 20 : Number(rawSize);
  if (num < 1) throw errors.pageNumTooSmall();
  if (size < 1) throw errors.pageSizeTooSmall();
  if (size > maxPageSize) throw errors.pageSizeTooLarge(maxPageSize);
  // A page far past the end is just empty; keep the offset a safe integer for the SQL.
  return { num, size, offset: Math.min((num - 1) * size, Number.MAX_SAFE_INTEGER) };
}

/** `total` is the number of pages. */
export function pagination(page: Page, matches: number): Pagination {
  const total = Math.ceil(matches / page.size);
  const hasNext = page.num < total;
  return { page: page.num, total, has_next: hasNext, next_page: hasNext ? page.num + 1 : null };
}

/** `true`, `1` (any case) or the bare flag (`?idsOnly`) are true. */
export function parseFlag(q: URLSearchParams, name: string): boolean {
  const v = q.get(name);
  if (v === null) return false;
  const s = v.trim().toLowerCase();
  return s === '' || s === 'true' || s === '1';
}

export interface AttrFilter {
  label: string;
  value: string;
}

export interface ListFilters {
  /** Labels that start or end with this text (case-sensitive, literal). */
  label: string | undefined;
  /** Each must hold, by any attribute: an attribute with that label and value. */
  attrs: AttrFilter[];
  /** Each must hold, by any attribute: an attribute whose type or value_type equals it. */
  attrTypes: string[];
  sortByLabel: boolean;
}

export function parseListFilters(q: URLSearchParams): ListFilters {
  const attrs = q.getAll('attr').map((f) => {
    const i = f.indexOf('=');
    if (i < 0) throw errors.attrFilterWithoutValue(f);
    return { label: f.slice(0, i), value: f.slice(i + 1) };
  });
  const label = q.get('label');
  return {
    label: label === null || label === '' ? undefined : label,
    attrs,
    attrTypes: q.getAll('attr_type').filter((t) => t !== ''),
    sortByLabel: q.get('sortBy') === 'label',
  };
}
