// The API description (issue 8): GET /openapi.json is a valid OpenAPI 3.1 document, equal to the
// committed docs/openapi.json; every route the service serves is in it and every route in it is
// served, on the listeners it says; its schemas compile (strict) and its examples fit them.
import fs from 'node:fs/promises';
import path from 'node:path';
import { Validator } from '@seriousme/openapi-schema-validator';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { projectRoot } from '../../src/paths.js';
import { operationKey } from '../../src/http/route.js';
import { http, login, startTestService, tenantToken, type TestService } from '../helpers/service.js';
import { operationsOf, schemaValidators, type Doc } from './helpers.js';

let svc: TestService;
let token: string;
let served: { status: number; text: string; headers: Headers };
let doc: Doc;

beforeAll(async () => {
  svc = await startTestService();
  token = await login(svc.base);
  served = await http('GET', `${svc.base}/openapi.json`);
  doc = JSON.parse(served.text) as Doc;
});
afterAll(() => svc?.stop());

describe('GET /openapi.json', () => {
  it('is served without a token, as JSON', () => {
    expect(served.status).toBe(200);
    expect(served.headers.get('content-type')).toBe('application/json');
  });

  it('is a valid OpenAPI 3.1 document (@seriousme/openapi-schema-validator)', async () => {
    const validator = new Validator();
    const result = await validator.validate(structuredClone(doc) as Record<string, unknown>);
    expect(result.errors, JSON.stringify(result.errors, null, 2)).toBeUndefined();
    expect(result.valid).toBe(true);
    expect(validator.version).toBe('3.1');
  });

  it('equals the committed docs/openapi.json (run `npm run openapi` after changing the API)', async () => {
    const committed = await fs.readFile(path.join(projectRoot, 'docs/openapi.json'), 'utf8');
    expect(served.text === committed, 'docs/openapi.json is stale: run `npm run openapi`').toBe(true);
  });

  it('declares the bearer JWT scheme, required everywhere except the public operations', () => {
    const d = doc as unknown as { security: unknown; components: { securitySchemes: Record<string, unknown> } };
    expect(d.components.securitySchemes.bearerAuth).toMatchObject({ type: 'http', scheme: 'bearer', bearerFormat: 'JWT' });
    expect(d.security).toEqual([{ bearerAuth: [] }]);
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
    expect(open.sort()).toEqual(['GET /health', 'GET /metrics', 'GET /openapi.json', ...hooks, 'POST /auth'].sort());
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

  it('over HTTP: each described operation answers on its listeners and is unknown on the other', async () => {
    // A tenant of its own: the probes may delete what they find.
    const probeToken = await tenantToken(svc.base, token, 'probe', 'admin');
    const base = { public: svc.base, internal: svc.internal };
    for (const { method, path: p, op } of operationsOf(doc)) {
      const url = p.replace(/\{[^}]+\}/g, 'probe');
      for (const listener of ['public', 'internal'] as const) {
        const res = await http(method, base[listener] + url, { token: probeToken });
        const unknown = res.status === 404 && res.body?.message === 'Invalid endpoint requested';
        const label = `${method} ${p} on ${listener}: ${res.status} ${res.text.slice(0, 100)}`;
        if (op['x-listeners'].includes(listener)) {
          expect(unknown || res.status === 405, label).toBe(false);
        } else {
          expect(unknown, label).toBe(true);
        }
      }
    }
  });

  it('a path that is not described is unknown on both listeners', async () => {
    for (const base of [svc.base, svc.internal]) {
      expect((await http('GET', `${base}/not/described`, { token })).body).toEqual({ message: 'Invalid endpoint requested', status: 404 });
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
        if (!['GET /health', 'GET /metrics', 'GET /openapi.json', 'DELETE /device'].includes(`${method} ${p}`)) {
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
        for (const media of Object.values(response!.content ?? {})) {
          const value = media.examples?.[ex.name]?.value;
          expect(value, `${method} ${p} ${ex.name}: an answer`).toBeDefined();
          const validate = compile(media.schema);
          expect(validate(value), `${method} ${p} ${ex.name}: ${JSON.stringify(validate.errors)}`).toBe(true);
        }
      }
    }
  });

  it('every example gives every path parameter, and every required query parameter when it succeeds', () => {
    for (const { method, path: p, op } of operationsOf(doc)) {
      for (const ex of op['x-examples']) {
        for (const param of op.parameters) {
          const given = param.examples?.[ex.name];
          if (param.in === 'path' || (param.required && ex.status < 300))
            expect(given, `${method} ${p} ${ex.name}: ${param.name}`).toBeDefined();
        }
      }
    }
  });
});
