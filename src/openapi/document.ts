// The OpenAPI 3.1 document, generated from the routes' declarations (src/http/types.ts
// `RouteDecl`: each route's parameters, query, body, answers and examples, beside its handler)
// and the shared component schemas (src/schemas/). Built once at start and served as text at
// GET /openapi.json; `npm run openapi` writes it to docs/openapi.json.
//
// Listeners: the document's `servers` is the public listener; operations of the internal
// listener carry `x-listeners: ["internal"]`, the tag `internal` and an operation-level
// `servers` entry for the internal listener; operations on both (health, metrics) list both.
// The committed document names the listeners by their settings (server variables); the served
// one by the addresses the client reached (src/openapi/served.ts).
//
// Examples: `x-examples` of an operation lists its example exchanges: name, status, fixture,
// and the request as sent (`request`: path and query parameters, headers, body). The examples
// of the parameters and the request body (under the same name) show those values that fit
// their schema, typed as the schema says; an example of a refused request (a page number that
// is not an integer, say) shows its input in `x-examples` only. The answer is under the status
// it answers with.
import fs from 'node:fs';
import path from 'node:path';
import { Ajv2020, type ValidateFunction } from 'ajv/dist/2020.js';
import { errors, type ErrorKey } from '../errors.js';
import { operationKey, queryChecks } from '../http/route.js';
import type { Example, Listener, ResponseDoc, RouteDecl } from '../http/types.js';
import { projectRoot } from '../paths.js';
import { errorSchemaName, errorSchemas, type ErrorLimits } from '../schemas/errors.js';
import type { QueryLimits } from '../schemas/queries.js';
import { ref, responseSchemas } from '../schemas/responses.js';
import { isBodySchema, type NamedSchema, type QueryCheck } from '../schemas/validator.js';

export type DocumentLimits = QueryLimits & ErrorLimits;

const SERVER_DESCRIPTIONS: Record<Listener, string> = {
  public: 'Public listener (HOST, PORT).',
  internal: 'Internal listener (INTERNAL_HOST, INTERNAL_PORT): platform services only, never exposed outside the platform.',
};
/** The listeners by their settings, for the committed document. */
const SERVER_VARIABLES: Record<Listener, object> = {
  public: { host: { default: 'localhost' }, port: { default: '8000' } },
  internal: { host: { default: '127.0.0.1' }, port: { default: '8001' } },
};

/** The base URL of each listener, as a client reaches it. */
export type ServerUrls = Record<Listener, string>;

function server(listener: Listener, urls: ServerUrls | undefined): object {
  if (urls) return { url: urls[listener], description: SERVER_DESCRIPTIONS[listener] };
  return { url: 'http://{host}:{port}', description: SERVER_DESCRIPTIONS[listener], variables: SERVER_VARIABLES[listener] };
}

const TAGS = [
  { name: 'auth', description: 'Tokens and users.' },
  { name: 'templates', description: 'Device models with typed attributes (interface.md §4.1).' },
  { name: 'devices', description: 'Devices built from templates (interface.md §4.2).' },
  { name: 'pre-shared keys', description: 'Keys of `psk` attributes (interface.md §4.3).' },
  { name: 'credentials', description: 'Device credentials: the passwords devices log in to the broker with (docs/credentials.md).' },
  { name: 'actuation', description: 'Configuration messages to devices (interface.md §4.2, §6.2).' },
  { name: 'history', description: 'Stored attribute values (interface.md §4.5).' },
  { name: 'live', description: 'Changes pushed as they happen: committed telemetry, registry changes, device status (docs/live.md).' },
  { name: 'internal', description: 'Platform-internal endpoints, served on the internal listener only (interface.md §4.4).' },
  {
    name: 'broker',
    description:
      'External brokers (EMQX, VerneMQ) ask who may log in as a device and use which topic; internal listener, no token (docs/operations.md §2).',
  },
  { name: 'operations', description: 'Health, metrics and this description; no token needed.' },
];

/** Schemas as the document shows them: without `$id` and our `x-` annotations (src/schemas/validator.ts). */
function clean(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(clean);
  if (typeof value !== 'object' || value === null) return value;
  return Object.fromEntries(
    Object.entries(value)
      .filter(([k]) => k !== '$id' && !k.startsWith('x-'))
      .map(([k, v]) => [k, clean(v)]),
  );
}

const schemaOf = (s: string | object) => (typeof s === 'string' ? ref(s) : s);
const oneOrAny = (list: object[]) => (list.length === 1 ? list[0]! : { anyOf: list });

/** Body schemas met in request bodies, by component name, in the order met. */
type BodyComponents = Map<string, NamedSchema>;

/** A request body's schema with each body schema it holds (`bodySchema`) as a reference to its component. */
function bodyRefs(node: unknown, found: BodyComponents): unknown {
  if (Array.isArray(node)) return node.map((v) => bodyRefs(v, found));
  if (typeof node !== 'object' || node === null) return node;
  if (isBodySchema(node)) {
    const seen = found.get(node.$id);
    if (seen && seen !== node) throw new Error(`two body schemas are named ${node.$id}`);
    found.set(node.$id, node);
    return ref(node.$id);
  }
  return Object.fromEntries(Object.entries(node).map(([k, v]) => [k, bodyRefs(v, found)]));
}

/** An example's query as sent. */
function queryText(query: Example['query']): URLSearchParams {
  const q = new URLSearchParams();
  for (const [name, value] of Object.entries(query ?? {}))
    for (const v of Array.isArray(value) ? value : [value]) q.append(name, String(v));
  return q;
}

function parameters(route: RouteDecl, examples: Example[], limits: QueryLimits, check: QueryCheck | undefined): object[] {
  const out: object[] = [];
  for (const [name, schema] of Object.entries(route.params ?? {})) {
    const { description, ...rest } = schema as { description?: string };
    const ex = Object.fromEntries(examples.map((e) => [e.name, { value: (e.params ?? route.exampleParams ?? {})[name] }]));
    out.push({ name, in: 'path', required: true, description, schema: rest, examples: ex });
  }
  if (route.query) {
    const q = route.query(limits);
    // Each example's values as the query check types them (`"2"` an integer, `?flag` true, a list).
    const typed = new Map(examples.map((e) => [e.name, check?.run(queryText(e.query)).values ?? {}]));
    for (const [name, schema] of Object.entries(q.properties)) {
      const { description, ...rest } = clean(schema) as { description?: string };
      const given = examples.filter((e) => e.query?.[name] !== undefined && typed.get(e.name)![name] !== undefined);
      const ex = Object.fromEntries(given.map((e) => [e.name, { value: typed.get(e.name)![name] }]));
      out.push({
        name,
        in: 'query',
        required: q.required?.includes(name) ?? false,
        description,
        schema: rest,
        ...(Object.keys(ex).length > 0 ? { examples: ex } : {}),
      });
    }
  }
  return out;
}

function responses(route: RouteDecl, examples: Example[]): Record<string, object> {
  const open = route.auth === false;
  const docs: Record<number, ResponseDoc> = { ...route.responses };
  // Every route may answer these; documented once here.
  if (!open)
    docs[401] ??= { description: 'No token, or an invalid one (auth is checked before routing).', errors: ['noToken', 'invalidToken'] };
  if (route.body) docs[413] ??= { description: 'The body is larger than MAX_BODY_BYTES.', errors: ['bodyTooLarge'] };
  docs[500] ??= { description: 'An unexpected failure (logged with its cause).', errors: ['internal'] };
  // Every authenticated route reads the database: while it is down or out of connections, 503;
  // and any request still running when a shutdown's drain ends is answered 503.
  const unavailable: ErrorKey[] = [...(open ? [] : (['unhealthy'] as ErrorKey[])), 'shuttingDown'];
  const given = docs[503];
  if (!given) {
    docs[503] = {
      description: open
        ? 'The service is shutting down and the request was still running.'
        : 'The database is unavailable (down, restarting or out of connections), or the service is shutting down; retry later.',
      errors: unavailable,
    };
  } else {
    docs[503] = { ...given, errors: [...(given.errors ?? []), ...unavailable.filter((k) => !given.errors?.includes(k))] };
  }
  const out: Record<string, object> = {};
  for (const [status, doc] of Object.entries(docs)) {
    const schemas = [...(doc.schema ? [schemaOf(doc.schema)] : []), ...(doc.errors ?? []).map((k: ErrorKey) => ref(errorSchemaName(k)))];
    const main = doc.contentType ?? 'application/json';
    const content: Record<string, Record<string, unknown>> = {};
    const mediaOf = (contentType: string, schema: object) => {
      const ex = examples.filter((e) => String(e.status) === status && (e.contentType ?? main) === contentType);
      content[contentType] = {
        schema,
        ...(ex.length > 0 ? { examples: Object.fromEntries(ex.map((e) => [e.name, { summary: e.summary, value: e.response }])) } : {}),
      };
    };
    if (schemas.length > 0) mediaOf(main, oneOrAny(schemas));
    for (const alt of doc.alternatives ?? []) mediaOf(alt.contentType, alt.schema);
    out[status] = {
      description: doc.description,
      ...(Object.keys(content).length > 0 ? { content } : {}),
    };
  }
  return out;
}

/** The request of an example as sent: `x-examples[].request`. */
function requestOf(route: RouteDecl, e: Example): object {
  const params = e.params ?? route.exampleParams;
  return {
    ...(params && Object.keys(params).length > 0 ? { params } : {}),
    ...(e.query ? { query: e.query } : {}),
    ...(e.headers ? { headers: e.headers } : {}),
    ...(e.body !== undefined ? { body: e.body } : {}),
  };
}

function operation(
  route: RouteDecl,
  limits: QueryLimits,
  bodies: BodyComponents,
  check: QueryCheck | undefined,
  urls: ServerUrls | undefined,
): object {
  const open = route.auth === false;
  const examples = [...route.examples];
  if (!open) examples.push({ name: 'noToken', summary: 'Without a token', status: 401, response: errors.noToken().body });
  const listeners = route.listeners ?? ['public'];
  const withBody = examples.filter((e) => e.body !== undefined);
  return {
    operationId: operationKey(route)
      .replace(/[^A-Za-z0-9]+/g, '_')
      .replace(/^_|_$/g, ''),
    summary: route.summary,
    ...(route.description ? { description: route.description } : {}),
    tags: [route.tag],
    ...(open ? { security: [] } : {}),
    ...(listeners.length === 1 && listeners[0] === 'public' ? {} : { servers: listeners.map((l) => server(l, urls)) }),
    'x-listeners': listeners,
    // Every example exchange: its name (which ties its parameters, body and answer), the status it answers with, its fixture, its request.
    'x-examples': examples.map((e) => ({
      name: e.name,
      summary: e.summary,
      status: e.status,
      ...(e.fixture ? { fixture: e.fixture } : {}),
      request: requestOf(route, e),
    })),
    parameters: parameters(route, examples, limits, check),
    ...(route.body
      ? {
          requestBody: {
            required: true,
            ...(route.body.description ? { description: route.body.description } : {}),
            content: {
              'application/json': {
                schema: bodyRefs(route.body.schema, bodies),
                ...(withBody.length > 0
                  ? { examples: Object.fromEntries(withBody.map((e) => [e.name, { summary: e.summary, value: e.body }])) }
                  : {}),
              },
            },
          },
        }
      : {}),
    responses: responses(route, examples),
  };
}

function version(): string {
  return (JSON.parse(fs.readFileSync(path.join(projectRoot, 'package.json'), 'utf8')) as { version: string }).version;
}

type Operation = {
  parameters: Array<{ schema: object; examples?: Record<string, { value: unknown }> }>;
  requestBody?: { content: Record<string, { schema: object; examples?: Record<string, { value: unknown }> }> };
};

/**
 * Drops the parameter and request body examples that do not fit their schema (the inputs of
 * refused requests): those show in `x-examples` only.
 */
function keepFittingExamples(paths: Record<string, Record<string, object>>, components: object): void {
  const ajv = new Ajv2020({ strict: false, validateFormats: false, allowUnionTypes: true });
  ajv.addSchema({ $id: 'doc', components });
  const rebase = (v: unknown): unknown => {
    if (Array.isArray(v)) return v.map(rebase);
    if (typeof v !== 'object' || v === null) return v;
    return Object.fromEntries(
      Object.entries(v).map(([k, x]) => [k, k === '$ref' && typeof x === 'string' && x.startsWith('#/') ? `doc${x}` : rebase(x)]),
    );
  };
  const keep = (schema: object, examples: Record<string, { value: unknown }> | undefined) => {
    if (!examples) return;
    const fits: ValidateFunction = ajv.compile(rebase(schema) as object);
    for (const [name, ex] of Object.entries(examples)) if (!fits(ex.value)) delete examples[name];
  };
  for (const item of Object.values(paths)) {
    for (const op of Object.values(item) as Operation[]) {
      for (const p of op.parameters) {
        keep(p.schema, p.examples);
        if (p.examples && Object.keys(p.examples).length === 0) delete p.examples;
      }
      for (const media of Object.values(op.requestBody?.content ?? {})) {
        keep(media.schema, media.examples);
        if (media.examples && Object.keys(media.examples).length === 0) delete media.examples;
      }
    }
  }
}

/** The component schemas that the paths reference, directly or through other components. */
function referenced(paths: object, schemas: Record<string, unknown>): Record<string, unknown> {
  const names = new Set<string>();
  const walk = (v: unknown): void => {
    if (Array.isArray(v)) return v.forEach(walk);
    if (typeof v !== 'object' || v === null) return;
    for (const [k, x] of Object.entries(v)) {
      if (k === '$ref' && typeof x === 'string' && x.startsWith('#/components/schemas/')) {
        const name = x.slice('#/components/schemas/'.length);
        if (!names.has(name)) {
          names.add(name);
          walk(schemas[name]);
        }
      } else walk(x);
    }
  };
  walk(paths);
  return Object.fromEntries(Object.entries(schemas).filter(([name]) => names.has(name)));
}

/**
 * The document of these routes, for these limits (the configured ones: they show as maxima and
 * in messages). `urls`: the listeners' base URLs as a client reaches them; without, the
 * listeners are named by their settings (server variables).
 */
function buildOpenApi(routes: readonly RouteDecl[], limits: DocumentLimits, urls?: ServerUrls): Record<string, unknown> {
  const paths: Record<string, Record<string, object>> = {};
  const bodies: BodyComponents = new Map();
  const checks = queryChecks(routes, limits);
  for (const route of routes) {
    const [method, p] = operationKey(route).split(' ') as [string, string];
    const item = (paths[p] ??= {});
    const key = method.toLowerCase();
    if (item[key]) throw new Error(`${method} ${p} is declared by two routes`);
    item[key] = operation(route, limits, bodies, checks.get(operationKey(route)), urls);
  }
  const all: Record<string, unknown> = {};
  for (const [name, s] of bodies) all[name] = clean(s);
  Object.assign(all, clean(responseSchemas), clean(errorSchemas(limits)));
  // Only what an operation can answer: an error of the registry no route answers (404 for an
  // unknown path, say, which is no operation's) is described in info.description instead.
  const schemas = referenced(paths, all);
  keepFittingExamples(paths, { schemas });
  return {
    openapi: '3.1.0',
    info: {
      title: 'device-registry',
      version: version(),
      summary: 'IoT device registry: templates, devices, pre-shared keys, actuation, history.',
      description:
        'Every request and query is checked against the schemas of this document; error bodies are exact (components `Error.*`). ' +
        'Every operation except POST /auth, /health, /health/live, /health/ready, /metrics, /openapi.json, /live and the broker hooks needs `Authorization: Bearer <jwt>` (from POST /auth). ' +
        'Operations tagged `internal` are served on the internal listener only. ' +
        'A path no operation has answers 404 `{"message": "Invalid endpoint requested", "status": 404}`, a known path with another method 405 with `Allow` (the token is checked first: without a valid one, both answer 401). ' +
        'Every answer carries `X-Request-Id` (the one sent, or one made by the service), the WebSocket upgrade of GET /stream (101) included. See docs/api.md.',
      license: { name: 'MIT', identifier: 'MIT' },
    },
    jsonSchemaDialect: 'https://json-schema.org/draft/2020-12/schema',
    servers: [server('public', urls)],
    security: [{ bearerAuth: [] }],
    tags: TAGS,
    paths,
    components: {
      securitySchemes: {
        bearerAuth: {
          type: 'http',
          scheme: 'bearer',
          bearerFormat: 'JWT',
          description:
            'A token from POST /auth (HS256, signed by the service; claims service, username, userid, profile, iat, exp, iss, jti).',
        },
      },
      schemas,
    },
  };
}

/** The document as committed (listeners by their settings): two-space JSON with a final newline. */
export const openApiText = (routes: readonly RouteDecl[], limits: DocumentLimits, urls?: ServerUrls) =>
  JSON.stringify(buildOpenApi(routes, limits, urls), null, 2) + '\n';
