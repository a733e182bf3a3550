// The API description (issue 8): GET /openapi.json is a valid OpenAPI 3.1 document, equal to the
// committed docs/openapi.json but for its servers, which are the addresses the client reached;
// every route the service serves is in it and every route in it is served, at the server it
// names; its schemas compile (strict) and its examples fit them.
import fs from 'node:fs/promises';
import path from 'node:path';
import { Validator } from '@seriousme/openapi-schema-validator';
import { beforeAll, describe, expect, it } from 'vitest';
import { projectRoot } from '../../src/paths.js';
import { operationKey } from '../../src/http/route.js';
import type { ErrorBody } from '../helpers/api.js';
import { serverUrls } from '../../src/openapi/served.js';
import { http, tenantToken, useService } from '../helpers/service.js';
import { operationsOf, schemaValidators, type Doc, type ServerDoc } from './helpers.js';

/** The document without its `servers` (top level and per operation). */
function withoutServers(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(withoutServers);
  if (typeof value !== 'object' || value === null) return value;
  return Object.fromEntries(
    Object.entries(value)
      .filter(([k]) => k !== 'servers')
      .map(([k, v]) => [k, withoutServers(v)]),
  );
}

/** Where the document places an operation: its own servers, else the document's. */
const serversOf = (op: { servers?: ServerDoc[] }) => (op.servers ?? doc.servers).map((s) => s.url);

const svc = useService();
let served: { status: number; text: string; headers: Headers };
let doc: Doc;

beforeAll(async () => {
  served = await http('GET', `${svc.base}/openapi.json`);
  doc = JSON.parse(served.text) as Doc;
});

describe('GET /openapi.json', () => {
  it('is served without a token, as JSON', () => {
    expect(served.status).toBe(200);
    expect(served.headers.get('content-type')).toBe('application/json');
  });

  it('is a valid OpenAPI 3.1 document (@seriousme/openapi-schema-validator)', async () => {
    const validator = new Validator();
    const result = await validator.validate(structuredClone(doc));
    expect(result.errors, JSON.stringify(result.errors, null, 2)).toBeUndefined();
    expect(result.valid).toBe(true);
    expect(validator.version).toBe('3.1');
  });

  it('equals the committed docs/openapi.json but for the servers (run `npm run openapi` after changing the API)', async () => {
    const committed = JSON.parse(await fs.readFile(path.join(projectRoot, 'docs/openapi.json'), 'utf8')) as Doc;
    expect(withoutServers(doc), 'docs/openapi.json is stale: run `npm run openapi`').toEqual(withoutServers(committed));
    // The committed one names the listeners by their settings.
    expect(committed.servers).toEqual([
      {
        url: 'http://{host}:{port}',
        description: 'Public listener (HOST, PORT).',
        variables: { host: { default: 'localhost' }, port: { default: '8000' } },
      },
    ]);
  });

  it('names the servers the client reached: the public listener, and the internal one for the internal operations', async () => {
    expect(doc.servers.map((s) => s.url)).toEqual([svc.base]);
    for (const { method, path: p, op } of operationsOf(doc)) {
      const expected = op['x-listeners'].map((l) => (l === 'public' ? svc.base : svc.internal));
      expect(serversOf(op), `${method} ${p}`).toEqual(expected);
    }
    expect(serversOf(doc.paths['/internal/device']!.get!)).toEqual([svc.internal]);
    // Asked on the internal listener, the same addresses.
    const fromInternal = JSON.parse((await http('GET', `${svc.internal}/openapi.json`)).text) as Doc;
    expect(fromInternal.servers.map((s) => s.url)).toEqual([svc.base]);
    expect(fromInternal.paths['/internal/device']!.get!.servers!.map((s) => s.url)).toEqual([svc.internal]);
  });

  it('behind a proxy: the Host and X-Forwarded-Proto the client used', async () => {
    const viaProxy = JSON.parse(
      (await http('GET', `${svc.base}/openapi.json`, { headers: { 'x-forwarded-host': 'api.example.test', 'x-forwarded-proto': 'https' } }))
        .text,
    ) as Doc;
    expect(viaProxy.servers.map((s) => s.url)).toEqual(['https://api.example.test']);
    // The internal listener is bound to 127.0.0.1 (INTERNAL_HOST), so it is named by that address.
    expect(viaProxy.paths['/internal/device']!.get!.servers!.map((s) => s.url)).toEqual([svc.internal]);
    // A Host header that is no host name is not used.
    const odd = await http('GET', `${svc.base}/openapi.json`, { headers: { 'x-forwarded-host': 'evil"} ,{"x' } });
    expect((JSON.parse(odd.text) as Doc).servers.map((s) => s.url)).toEqual([svc.base]);
    // Nor one with a port no client can have reached (the server URL would be no URL).
    // Nor one that makes no URL (before, found by an audit, these were served as the server's URL,
    // which no URL parser reads: http://999.1.1.1:8000 and the like).
    for (const headers of [
      { 'x-forwarded-host': 'evil.example.test:99999' },
      { 'x-forwarded-host': 'api.example.test:0' },
      { 'x-forwarded-host': '999.1.1.1:8000' },
      { 'x-forwarded-host': '1.2.3.4.5' },
      { 'x-forwarded-host': '[1.2.3.4]:8000' },
      { 'x-forwarded-host': '[::::]' },
    ]) {
      const url = (JSON.parse((await http('GET', `${svc.base}/openapi.json`, { headers })).text) as Doc).servers[0]!.url;
      expect(url, JSON.stringify(headers)).toBe(svc.base);
    }
  });

  it('a host name with an underscore or a tilde (RFC 3986 unreserved, as Compose names) is the host reached', async () => {
    // Before (found by an audit), such a Host was taken for no host name: the document named
    // http://localhost:<port>, not the server the client reached.
    const headers = { 'x-forwarded-host': 'device_registry:8000' };
    expect((JSON.parse((await http('GET', `${svc.base}/openapi.json`, { headers })).text) as Doc).servers[0]!.url).toBe(
      'http://device_registry:8000',
    );
    const listeners = { public: { host: '0.0.0.0', port: 8000 }, internal: { host: '0.0.0.0', port: 8001 } };
    expect(serverUrls({ listener: 'internal', host: 'stack_registry_1:8001', forwardedHost: '', forwardedProto: '' }, listeners)).toEqual({
      public: 'http://stack_registry_1:8000',
      internal: 'http://stack_registry_1:8001',
    });
    expect(serverUrls({ listener: 'public', host: 'my~host', forwardedHost: '', forwardedProto: '' }, listeners).public).toBe(
      'http://my~host',
    );
  });

  it('without a usable Host, a listener bound to every address is named localhost, not 0.0.0.0', () => {
    const listeners = { public: { host: '0.0.0.0', port: 8000 }, internal: { host: '127.0.0.1', port: 8001 } };
    expect(serverUrls({ listener: 'public', host: 'evil"host', forwardedHost: '', forwardedProto: '' }, listeners)).toEqual({
      public: 'http://localhost:8000',
      internal: 'http://127.0.0.1:8001',
    });
    expect(serverUrls({ listener: 'public', host: 'api.example.test:8000', forwardedHost: '', forwardedProto: '' }, listeners).public).toBe(
      'http://api.example.test:8000',
    );
  });

  it('answers 406 to a client that accepts no JSON', async () => {
    const res = await http('GET', `${svc.base}/openapi.json`, { headers: { accept: 'text/html' } });
    expect([res.status, res.body]).toEqual([406, { message: 'This resource is only available as application/json', status: 406 }]);
    expect((await http('GET', `${svc.base}/openapi.json`, { headers: { accept: 'text/html, */*;q=0.1' } })).status).toBe(200);
    expect((await http('GET', `${svc.base}/openapi.json`, { headers: { accept: 'application/*' } })).status).toBe(200);
  });

  it('declares the bearer JWT scheme, required everywhere except the public operations', () => {
    expect(doc.components.securitySchemes.bearerAuth).toMatchObject({ type: 'http', scheme: 'bearer', bearerFormat: 'JWT' });
    expect(doc.security).toEqual([{ bearerAuth: [] }]);
    const open = operationsOf(doc)
      .filter((o) => o.op.security !== undefined)
      .map((o) => `${o.method} ${o.path}`);
    // The broker hooks (internal listener): the brokers that call them cannot hold a token.
    const hooks = [
      'emqx/authenticate',
      'emqx/authorize',
      'vernemq/auth_on_publish',
      'vernemq/auth_on_register',
      'vernemq/auth_on_subscribe',
    ].map((h) => `POST /broker/${h}`);
    expect(open.sort()).toEqual(
      [
        'GET /health',
        'GET /health/live',
        'GET /health/ready',
        'GET /live',
        'GET /metrics',
        'GET /openapi.json',
        ...hooks,
        'POST /auth',
      ].sort(),
    );
    // The document's own description names them (before, found by an audit, it left GET /live out).
    const info = doc.info.description;
    const listed = /Every operation except (.*?) needs `Authorization/.exec(info)![1]!;
    const named = new Set(listed.split(/, | and /));
    for (const op of open.filter((o) => !o.startsWith('POST /broker/')))
      expect(named.has(op) || named.has(op.replace(/^GET /, '')), op).toBe(true);
  });
});

describe('routes', () => {
  it('every route served (both listeners) is described, and every description is served, on the same listeners', () => {
    const fromService = svc.service.routes.flatMap((r) => (r.listeners ?? ['public']).map((l) => `${l} ${operationKey(r)}`)).sort();
    const fromDoc = operationsOf(doc)
      .flatMap((o) => o.op['x-listeners'].map((l) => `${l} ${o.method} ${o.path}`))
      .sort();
    expect(fromDoc).toEqual(fromService);
  });

  it('over HTTP: each described operation answers at the servers the document names, and is unknown at the others', async () => {
    // A tenant of its own: the probes may delete what they find.
    const probeToken = await tenantToken(svc.base, svc.token, 'probe', 'admin');
    for (const { method, path: p, op } of operationsOf(doc)) {
      const url = p.replace(/\{[^}]+\}/g, 'probe');
      const named = serversOf(op);
      for (const server of [svc.base, svc.internal]) {
        const res = await http<Partial<ErrorBody> | undefined>(method, server + url, { token: probeToken });
        const unknown = res.status === 404 && res.body?.message === 'Invalid endpoint requested';
        const label = `${method} ${p} at ${server}: ${res.status} ${res.text.slice(0, 100)}`;
        if (named.includes(server)) {
          expect(unknown || res.status === 405, label).toBe(false);
        } else {
          expect(unknown, label).toBe(true);
        }
      }
    }
  });

  it('a path that is not described is unknown on both listeners', async () => {
    for (const base of [svc.base, svc.internal]) {
      expect((await http('GET', `${base}/not/described`, { token: svc.token })).body).toEqual({
        message: 'Invalid endpoint requested',
        status: 404,
      });
    }
  });
});

describe('request bodies', () => {
  it('POST /history/latest: a body its schema admits is taken, and one refused for its shape does not fit the schema', async () => {
    // Before (found by an audit), the schema admitted `{}` and a body with both `devices` and
    // `template`, which the service refuses (exactly one of them): a client or contract checker
    // built from the document sent bodies it was sure of and got 400.
    const { schema } = doc.paths['/history/latest']!.post!.requestBody!.content['application/json']!;
    const fits = schemaValidators(doc)(schema);
    const { token } = svc;
    for (const body of [{}, { attrs: ['temperature'] }, { devices: ['a1b2c3'], template: 1 }]) {
      const res = await http('POST', `${svc.base}/history/latest`, { token, body });
      expect([res.status, fits(body)], JSON.stringify(body)).toEqual([400, false]);
    }
    for (const body of [{ devices: [] }, { devices: ['a1b2c3'], attrs: [] }, { template: 1 }, { template: 1, attrs: ['temperature'] }]) {
      const res = await http('POST', `${svc.base}/history/latest`, { token, body });
      expect([res.status, fits(body)], JSON.stringify(body)).toEqual([200, true]);
    }
  });
});

describe('schemas and examples', () => {
  it('every component schema compiles with ajv (JSON Schema 2020-12, strict)', () => {
    const compile = schemaValidators(doc);
    for (const [name, schema] of Object.entries(doc.components.schemas)) {
      expect(() => compile(schema), name).not.toThrow();
    }
  });

  it('every operation has examples, an error example, and (when authenticated) one without a token', () => {
    for (const { method, path: p, op } of operationsOf(doc)) {
      const statuses = op['x-examples'].map((e) => e.status);
      expect(statuses.length, `${method} ${p}`).toBeGreaterThan(0);
      expect(
        statuses.some((s) => s < 300),
        `${method} ${p}: a success example`,
      ).toBe(true);
      if (!op.security) expect(statuses, `${method} ${p}`).toContain(401);
      if (op.parameters.length > 0 || op.requestBody || !op.security) {
        // Operations that can fail on input show how (the public GETs cannot).
        if (!['DELETE /device'].includes(`${method} ${p}`)) {
          expect(
            statuses.some((s) => s >= 400),
            `${method} ${p}: an error example`,
          ).toBe(true);
        }
      }
    }
  });

  it('every example answer fits the schema documented for its status', () => {
    const compile = schemaValidators(doc);
    for (const { method, path: p, op } of operationsOf(doc)) {
      for (const ex of op['x-examples']) {
        const response = op.responses[String(ex.status)];
        expect(response, `${method} ${p} ${ex.name}: status ${ex.status} documented`).toBeDefined();
        // Its answer is under one media type (of several when Accept chooses the answer's type).
        const media = Object.values(response!.content ?? {});
        const under = media.filter((m) => m.examples?.[ex.name] !== undefined);
        expect(under.length, `${method} ${p} ${ex.name}: an answer`).toBe(media.length > 0 ? 1 : 0);
        for (const m of under) {
          const value = m.examples![ex.name]!.value;
          const validate = compile(m.schema);
          expect(validate(value), `${method} ${p} ${ex.name}: ${JSON.stringify(validate.errors)}`).toBe(true);
        }
      }
    }
  });

  it('every example gives every path parameter, and every required query parameter when it succeeds', () => {
    for (const { method, path: p, op } of operationsOf(doc)) {
      for (const ex of op['x-examples']) {
        for (const param of op.parameters) {
          const given = param.in === 'path' ? ex.request.params?.[param.name] : ex.request.query?.[param.name];
          if (param.in === 'path' || (param.required && ex.status < 300))
            expect(given, `${method} ${p} ${ex.name}: ${param.name}`).toBeDefined();
        }
      }
    }
  });

  it('the examples shown beside a parameter or a request body fit its schema (the inputs of refused requests are in x-examples only)', () => {
    const compile = schemaValidators(doc);
    let shown = 0;
    let refusedInputs = 0;
    for (const { method, path: p, op } of operationsOf(doc)) {
      for (const param of op.parameters) {
        for (const [name, ex] of Object.entries(param.examples ?? {})) {
          shown++;
          expect(compile(param.schema)(ex.value), `${method} ${p} ${param.name} ${name}`).toBe(true);
        }
      }
      for (const media of Object.values(op.requestBody?.content ?? {})) {
        for (const [name, ex] of Object.entries(media.examples ?? {})) {
          shown++;
          expect(compile(media.schema)(ex.value), `${method} ${p} body ${name}`).toBe(true);
        }
        refusedInputs += op['x-examples'].filter((e) => e.request.body !== undefined && media.examples?.[e.name] === undefined).length;
      }
    }
    expect(shown).toBeGreaterThan(50);
    // Refused bodies exist (a template without a label, say) and stay out of `examples`.
    expect(refusedInputs).toBeGreaterThan(5);
  });
});
