// What a list asks of the registry (decisions.md "Common"): a page and the list filters. The
// HTTP side builds them from the checked query (src/http/query.ts); services and repositories
// take them from here.

export interface Page {
  num: number;
  size: number;
  offset: number;
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
