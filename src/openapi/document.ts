// The OpenAPI 3.1 document, generated from the routes' declarations (src/http/types.ts
// `RouteDecl`: each route's parameters, query, body, answers and examples, beside its handler)
// and the shared component schemas (src/schemas/). Built once at start and served as text at
// GET /openapi.json; `npm run openapi` writes it to docs/openapi.json.
//
// Listeners: operations of the internal listener carry `x-listeners: ["internal"]`, the tag
// `internal` and an operation-level `servers` entry for INTERNAL_HOST:INTERNAL_PORT; operations
// on both (health, metrics) list both servers. Examples: `x-examples` of an operation lists its
// example exchanges (name, status, fixture); the name ties the example's parameter values,
// request body and answer (under the status it answers with) together.
import fs from 'node:fs';
import path from 'node:path';
import { errors, type ErrorKey } from '../errors.js';
import { operationKey } from '../http/route.js';
import type { Example, Listener, ResponseDoc, RouteDecl } from '../http/types.js';
import { projectRoot } from '../paths.js';
import { errorSchemaName, errorSchemas, type ErrorLimits } from '../schemas/errors.js';
import type { QueryLimits } from '../schemas/queries.js';
import { ref, responseSchemas } from '../schemas/responses.js';
import { isBodySchema, type NamedSchema } from '../schemas/validator.js';

export type DocumentLimits = QueryLimits & ErrorLimits;

const SERVERS: Record<Listener, object> = {
  public: {
    url: 'http://{host}:{port}',
    description: 'Public listener (HOST, PORT).',
    variables: { host: { default: 'localhost' }, port: { default: '8000' } },
  },
  internal: {
    url: 'http://{host}:{port}',
    description: 'Internal listener (INTERNAL_HOST, INTERNAL_PORT): platform services only, never exposed outside the platform.',
    variables: { host: { default: '127.0.0.1' }, port: { default: '8001' } },
  },
};

const TAGS = [
  { name: 'auth', description: 'Tokens and users.' },
  { name: 'templates', description: 'Device models with typed attributes (interface.md §4.1).' },
  { name: 'devices', description: 'Devices built from templates (interface.md §4.2).' },
  { name: 'pre-shared keys', description: 'Keys of `psk` attributes (interface.md §4.3).' },
  { name: 'credentials', description: 'Device credentials: the passwords devices log in to the broker with (docs/credentials.md).' },
  { name: 'actuation', description: 'Configuration messages to devices (interface.md §4.2, §6.2).' },
  { name: 'history', description: 'Stored attribute values (interface.md §4.5).' },
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

function parameters(route: RouteDecl, examples: Example[], limits: QueryLimits): object[] {
  const out: object[] = [];
  for (const [name, schema] of Object.entries(route.params ?? {})) {
    const { description, ...rest } = schema as { description?: string };
    const ex = Object.fromEntries(examples.map((e) => [e.name, { value: (e.params ?? route.exampleParams ?? {})[name] }]));
    out.push({ name, in: 'path', required: true, description, schema: rest, examples: ex });
  }
  if (route.query) {
    const q = route.query(limits);
    for (const [name, schema] of Object.entries(q.properties)) {
      const { description, ...rest } = clean(schema) as { description?: string };
      const ex = Object.fromEntries(examples.filter((e) => e.query?.[name] !== undefined).map((e) => [e.name, { value: e.query![name] }]));
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
  // Every authenticated route reads the database: while it is down or out of connections, 503.
  if (!open) {
    const unavailable = docs[503];
    if (!unavailable)
      docs[503] = {
        description: 'The database is unavailable (down, restarting or out of connections); retry later.',
        errors: ['unhealthy'],
      };
    else if (!unavailable.errors?.includes('unhealthy'))
      docs[503] = { ...unavailable, errors: [...(unavailable.errors ?? []), 'unhealthy'] };
  }
  const out: Record<string, object> = {};
  for (const [status, doc] of Object.entries(docs)) {
    const schemas = [...(doc.schema ? [schemaOf(doc.schema)] : []), ...(doc.errors ?? []).map((k: ErrorKey) => ref(errorSchemaName(k)))];
    const ex = examples.filter((e) => String(e.status) === status);
    const media: Record<string, unknown> = {};
    if (schemas.length > 0) {
      media.schema = oneOrAny(schemas);
      if (ex.length > 0) {
        media.examples = Object.fromEntries(ex.map((e) => [e.name, { summary: e.summary, value: e.response }]));
      }
    }
    out[status] = {
      description: doc.description,
      ...(schemas.length > 0 ? { content: { [doc.contentType ?? 'application/json']: media } } : {}),
    };
  }
  return out;
}

function operation(route: RouteDecl, limits: QueryLimits, bodies: BodyComponents): object {
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
    ...(listeners.length === 1 && listeners[0] === 'public' ? {} : { servers: listeners.map((l) => SERVERS[l]) }),
    'x-listeners': listeners,
    // Every example exchange: its name (which ties its parameters, body and answer), the status it answers with, its fixture.
    'x-examples': examples.map((e) => ({
      name: e.name,
      summary: e.summary,
      status: e.status,
      ...(e.fixture ? { fixture: e.fixture } : {}),
    })),
    parameters: parameters(route, examples, limits),
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

/** The document of these routes, for these limits (the configured ones: they show as maxima and in messages). */
export function buildOpenApi(routes: readonly RouteDecl[], limits: DocumentLimits): Record<string, unknown> {
  const paths: Record<string, Record<string, object>> = {};
  const bodies: BodyComponents = new Map();
  for (const route of routes) {
    const [method, p] = operationKey(route).split(' ') as [string, string];
    const item = (paths[p] ??= {});
    const key = method.toLowerCase();
    if (item[key]) throw new Error(`${method} ${p} is declared by two routes`);
    item[key] = operation(route, limits, bodies);
  }
  const schemas: Record<string, unknown> = {};
  for (const [name, s] of bodies) schemas[name] = clean(s);
  Object.assign(schemas, clean(responseSchemas), clean(errorSchemas(limits)));
  return {
    openapi: '3.1.0',
    info: {
      title: 'device-registry',
      version: version(),
      summary: 'IoT device registry: templates, devices, pre-shared keys, actuation, history.',
      description:
        'Every request and query is checked against the schemas of this document; error bodies are exact (components `Error.*`). ' +
        'Every operation except POST /auth, /health, /metrics, /openapi.json and the broker hooks needs `Authorization: Bearer <jwt>` (from POST /auth). ' +
        'Operations tagged `internal` are served on the internal listener only. See docs/api.md.',
      license: { name: 'MIT', identifier: 'MIT' },
    },
    jsonSchemaDialect: 'https://json-schema.org/draft/2020-12/schema',
    servers: [SERVERS.public],
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

/** The document as served and committed: two-space JSON with a final newline. */
export const openApiText = (routes: readonly RouteDecl[], limits: DocumentLimits) =>
  JSON.stringify(buildOpenApi(routes, limits), null, 2) + '\n';
