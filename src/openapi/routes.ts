// The join of the routes the service serves and the operations it describes, made once at
// start: each route must be described (with its listeners) and each description served, else
// the service does not start; each route's query schema is compiled with the configured limits.
// Also GET /openapi.json, which answers the document built at start.
import type { Listener, Route } from '../http/types.js';
import { compileQueries, type QueryCheck } from '../schemas/validator.js';
import type { QueryLimits } from '../schemas/queries.js';
import { operations } from './operations.js';

/** `GET /device/:id` -> `GET /device/{id}`, the key of src/openapi/operations.ts. */
export const operationKey = (r: Pick<Route, 'method' | 'path'>) => `${r.method} ${r.path.replace(/:([A-Za-z_][A-Za-z0-9_]*)/g, '{$1}')}`;

/** Differences between the routes and the operations; empty when they agree. */
export function undescribedRoutes(routes: Route[]): string[] {
  const served = new Map<string, Set<Listener>>();
  for (const r of routes) {
    const key = operationKey(r);
    if (!served.has(key)) served.set(key, new Set());
    served.get(key)!.add(r.listener ?? 'public');
  }
  const problems: string[] = [];
  for (const [key, listeners] of served) {
    const op = operations[key];
    if (!op) {
      problems.push(`${key} is served but not described in src/openapi/operations.ts`);
      continue;
    }
    const described = new Set(op.listeners ?? ['public']);
    if ([...listeners].sort().join() !== [...described].sort().join()) {
      problems.push(`${key} is served on ${[...listeners].join(', ')} but described on ${[...described].join(', ')}`);
    }
  }
  for (const key of Object.keys(operations)) if (!served.has(key)) problems.push(`${key} is described but not served`);
  return problems;
}

/** The compiled query check of every route whose operation names a query schema. */
export function queryChecks(routes: Route[], limits: QueryLimits): Map<Route, QueryCheck> {
  const problems = undescribedRoutes(routes);
  if (problems.length > 0) throw new Error(`routes and API description differ: ${problems.join('; ')}`);
  const compiled = compileQueries(limits);
  const out = new Map<Route, QueryCheck>();
  for (const r of routes) {
    const op = operations[operationKey(r)]!;
    if (op.query) out.set(r, compiled.get(op.query)!);
  }
  return out;
}

/** GET /openapi.json: the document, built once at start. */
export function openApiRoutes(documentText: string): Route[] {
  return [{ method: 'GET', path: '/openapi.json', auth: false, handler: () => ({ status: 200, raw: documentText }) }];
}
