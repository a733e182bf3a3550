import type { ApiError } from '../errors.js';
import type { QueryFailure, QueryValues } from '../schemas/validator.js';

export type Method = 'GET' | 'POST' | 'PUT' | 'DELETE' | 'PATCH';
export type Listener = 'public' | 'internal';

/** The verified token's claims (decisions.md "Authentication"). */
export interface Claims {
  service: string;
  username: string;
  userid: number;
  profile: string;
  iat: number;
  exp: number;
  iss: string;
  jti: string;
}

export interface Request {
  method: Method;
  path: string;
  /** The route pattern that matched, e.g. `/device/:id` (metrics label). */
  route: string;
  params: Record<string, string>;
  query: URLSearchParams;
  /**
   * The query checked against the operation's query schema (src/schemas/queries.ts): every
   * declared parameter converted to its type, defaults filled in. Empty for routes without one.
   */
  values: QueryValues;
  /** Routes with `queryFailure: 'handler'`: the query's first failure, for the handler to answer in its order. */
  queryFailure?: QueryFailure;
  /** Parsed JSON body for routes with `body: 'json'`; undefined otherwise. */
  body: unknown;
  /** `json-deferred` routes: the error a `json` route would have answered for this body. */
  bodyError?: ApiError;
  /** Verified claims; absent only on routes with `auth: false`. */
  claims: Claims | undefined;
  /** The caller's tenant (the token's `service` claim); '' on unauthenticated routes. */
  tenant: string;
  listener: Listener;
}

export interface Reply {
  status: number;
  /** Serialised with JSON.stringify; omit for an empty body. */
  body?: unknown;
  /** A body already serialised (JSON unless `contentType` says otherwise). */
  raw?: string;
  contentType?: string;
  headers?: Record<string, string>;
}

export interface Route {
  method: Method;
  /** Pattern with `:name` parameters, e.g. `/device/:id/attrs/:label/psk`. */
  path: string;
  /** Which listener serves it; default `public`. */
  listener?: Listener;
  /** Requires a valid token; default true. */
  auth?: boolean;
  /**
   * `json`: the body must be JSON with a JSON Content-Type (else 400 before the handler runs);
   * `json-deferred`: the same, but a bad body reaches the handler as `req.bodyError`, for
   * routes whose contract checks something else first; default: the body is not read.
   */
  body?: 'json' | 'json-deferred';
  /** The error for a body that is not JSON; default the contract's `Payload must be valid JSON...`. */
  badBody?: () => ApiError;
  /**
   * The query's schema is named by the route's operation (src/openapi/operations.ts) and checked
   * before the handler runs; a failure answers at once (`throw`, default) or reaches the
   * handler as `req.queryFailure` (`handler`), for a contract that checks something else first.
   */
  queryFailure?: 'throw' | 'handler';
  handler(req: Request): Promise<Reply> | Reply;
}
