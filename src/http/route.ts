// From a route's declaration to the route served: the services bound into its handler, its
// query schema compiled, and the key that names its operation in the document.
import type { QueryLimits } from '../schemas/queries.js';
import { compileQuery, type QueryCheck } from '../schemas/validator.js';
import type { Route, RouteDecl, RouteSpec } from './types.js';

/** The routes with `deps` given to each handler. */
export function bindRoutes<Deps>(specs: readonly RouteSpec<Deps>[], deps: Deps): Route[] {
  return specs.map((spec) => ({ ...spec, handler: (req) => spec.handler(req, deps) }));
}

/** `GET /device/:id` -> `GET /device/{id}`: the route's operation in the document. */
export const operationKey = (r: Pick<RouteDecl, 'method' | 'path'>) =>
  `${r.method} ${r.path.replace(/:([A-Za-z_][A-Za-z0-9_]*)/g, '{$1}')}`;

/** The compiled query check of every route that declares a query, by operation key; done once at start. */
export function queryChecks(routes: readonly RouteDecl[], limits: QueryLimits): Map<string, QueryCheck> {
  const out = new Map<string, QueryCheck>();
  for (const r of routes) {
    const key = operationKey(r);
    if (r.query && !out.has(key)) out.set(key, compileQuery(key, r.query(limits)));
  }
  return out;
}
