// What a route is: how it is served (method, path, listeners, token, body, query) and what the
// API description says of it (schemas of its parameters, body and answers, and examples), beside
// its handler. The server (src/http/server.ts), the request validator (src/schemas/validator.ts,
// via src/http/router.ts) and the OpenAPI document (src/openapi/document.ts) all read this one
// declaration.
import type { Claims } from '../auth/tokens.js';
import type { ApiError, ErrorKey } from '../errors.js';
import type { Logger } from '../log.js';
import type { QueryLimits } from '../schemas/queries.js';
import type { ResponseName } from '../schemas/responses.js';
import type { StreamOut } from '../types/stream.js';
import type { QueryFailure, QuerySchema, QueryValues } from '../schemas/validator.js';

export type Method = 'GET' | 'POST' | 'PUT' | 'DELETE' | 'PATCH';
export type Listener = 'public' | 'internal';

/** What a handler sees of a request. */
export interface Request {
  readonly method: Method;
  readonly path: string;
  readonly listener: Listener;
  readonly params: Record<string, string>;
  /**
   * The query checked against the route's query schema: every declared parameter converted to
   * its type, defaults filled in. Empty for routes without one.
   */
  readonly values: QueryValues;
  /** Routes with `queryFailure: 'handler'`: the query's first failure, for the handler to answer in its order. */
  readonly queryFailure: QueryFailure | undefined;
  /** The query string as sent (without `?`): for a route that refuses parameters it does not declare. */
  readonly queryString: string;
  /** The parsed JSON body of routes with a `body`; undefined otherwise. */
  readonly body: unknown;
  /** `json-deferred` routes: the error a `json` route would have answered for this body. */
  readonly bodyError: ApiError | undefined;
  /** Verified claims; absent only on routes with `auth: false`. */
  readonly claims: Claims | undefined;
  /** The caller's tenant (the token's `service` claim); '' on unauthenticated routes. */
  readonly tenant: string;
  /** The request's id: the client's `X-Request-Id` when usable, else one of ours; echoed in the answer. */
  readonly requestId: string;
  /** `Host`, `X-Forwarded-Proto`, `X-Forwarded-Host` and `Accept` as sent ('' when absent). */
  readonly host: string;
  readonly forwardedProto: string;
  readonly forwardedHost: string;
  readonly accept: string;
  /** A logger whose every line carries the request id. */
  logger(): Logger;
}

export type { StreamOut };

export interface Reply {
  status: number;
  /**
   * A streamed body (chunked): the status and headers are written, then this produces the body;
   * the answer ends when it resolves. A failure after the first chunk closes the connection.
   */
  stream?: (out: StreamOut) => Promise<void>;
  /** Serialised with JSON.stringify; omit for an empty body. */
  body?: unknown;
  /** A body already serialised (JSON unless `contentType` says otherwise). */
  raw?: string;
  contentType?: string;
  headers?: Record<string, string>;
}

/** A request body: how it is read and what it must be. */
export interface BodyDecl {
  /**
   * `json`: the body must be JSON with a JSON Content-Type (else 400 before the handler runs);
   * `json-deferred`: the same, but a bad body reaches the handler as `req.bodyError`, for routes
   * whose contract checks something else first.
   */
  read: 'json' | 'json-deferred';
  /** The error for a body that is not JSON; default the contract's `Payload must be valid JSON...`. */
  notJson?: () => ApiError;
  /**
   * Its schema: one declared with `bodySchema` (src/schemas/), or one built around such schemas;
   * the document shows each of them as a component. The area that owns the body validates it
   * against the same schema, in the contract's order.
   */
  schema: object;
  description?: string;
}

/** One answer of a route, by status. */
export interface ResponseDoc {
  description: string;
  /** A component of src/schemas/responses.ts, or an inline schema. */
  schema?: ResponseName | object;
  contentType?: string;
  /** Other media types of the same answer (chosen by `Accept` or a parameter), each with its schema. */
  alternatives?: Array<{ contentType: string; schema: object }>;
  /** Error bodies this status may carry (their schemas: src/schemas/errors.ts). */
  errors?: ErrorKey[];
}

/**
 * An example exchange, written against the fixture of src/openapi/examples.ts; the example test
 * (test/openapi/examples.test.ts) drives each one against the running service.
 */
export interface Example {
  name: string;
  summary: string;
  /** Path parameters (default: the route's `exampleParams`). */
  params?: Record<string, string | number>;
  query?: Record<string, string | number | string[]>;
  /** Request headers it sends (`Accept`, say). */
  headers?: Record<string, string>;
  body?: unknown;
  status: number;
  /** The answer (none for 204). */
  response?: unknown;
  /** The media type of the answer, when it is one of the response's `alternatives`. */
  contentType?: string;
  /** `no-devices`: the fixture without devices. */
  fixture?: 'no-devices';
}

/** A route without its handler: everything the router, the validator and the document read. */
export interface RouteDecl {
  method: Method;
  /** Pattern with `:name` parameters, e.g. `/device/:id/attrs/:label/psk`. */
  path: string;
  /** Where it is served; default public only. */
  listeners?: readonly Listener[];
  /** Requires a valid token; default true. */
  auth?: boolean;
  /**
   * Its answer depends on `Accept`: every line of the field is read (RFC 9110 §5.3, `acceptOf`).
   * Other routes get the first line only, read for ~1.5 µs less per request (measured: a bare
   * uWS handler 5-9 % slower reading every header).
   */
  negotiates?: boolean;
  summary: string;
  description?: string;
  /** Its group in the document (`tags` of src/openapi/document.ts). */
  tag: string;
  /** Path parameter schemas, by name. */
  params?: Record<string, object>;
  /** Its query parameters, with the configured limits; checked before the handler runs. */
  query?: (limits: QueryLimits) => QuerySchema;
  /**
   * A query failure answers at once (`throw`, default) or reaches the handler as
   * `req.queryFailure` (`handler`), for a contract that checks something else first.
   */
  queryFailure?: 'throw' | 'handler';
  /** Its body; without one the body is not read. */
  body?: BodyDecl;
  /** Its answers by status (401, 413, 500 and 503 are added where they apply). */
  responses: Record<number, ResponseDoc>;
  /** Example path parameters shared by the examples. */
  exampleParams?: Record<string, string | number>;
  examples: Example[];
}

/** A route as its area declares it: the handler gets the services it needs (`bindRoutes`). */
export interface RouteSpec<Deps> extends RouteDecl {
  handler(req: Request, deps: Deps): Promise<Reply> | Reply;
}

/** A route as served: its handler bound to the services. */
export interface Route extends RouteDecl {
  handler(req: Request): Promise<Reply> | Reply;
}
