// Every example of the served API description, driven against the running service: the answer
// must have the example's status, fit the schema documented for that status (ajv, strict), and,
// for errors, equal the documented body. So the description cannot drift from the behaviour.
//
// Each example runs in a fresh tenant holding the fixture the examples are written against
// (src/openapi/examples.ts, docs/api.md); template id 1 in path parameters and in `templates`
// of request bodies stands for the fixture template's id.
import { beforeAll, describe, expect, it } from 'vitest';
import { CREDENTIAL_ID, thermometerBody } from '../../src/openapi/examples.js';
import { takeDatabaseAway } from '../helpers/faults.js';
import { insertHistory } from '../helpers/registry-fixtures.js';
import type { TemplateCreated } from '../helpers/api.js';
import { http, tenantToken, useService, type ApiResponse } from '../helpers/service.js';
import { operationsOf, schemaValidators, type Doc, type DocOperation } from './helpers.js';

const svc = useService();
let doc: Doc;
let compile: ReturnType<typeof schemaValidators>;
let tenants = 0;

const FIXTURE_TEMPLATE_ID = 1;

beforeAll(async () => {
  doc = (await http<Doc>('GET', `${svc.base}/openapi.json`)).body;
  compile = schemaValidators(doc);
});

interface Fixture {
  tenant: string;
  token: string;
  templateId: number;
}

async function ok<T>(res: Promise<ApiResponse<T>>, what: string): Promise<T> {
  const r = await res;
  if (r.status >= 300) throw new Error(`fixture ${what}: ${r.status} ${r.text}`);
  return r.body;
}

/** The fixture of the examples, in a tenant of its own. */
async function fixture(kind: string | undefined): Promise<Fixture> {
  const tenant = `examples-${++tenants}`;
  const token = await tenantToken(svc.base, svc.token, tenant, 'admin');
  const created = await ok(
    http<TemplateCreated>('POST', `${svc.base}/template`, {
      token,
      body: thermometerBody,
    }),
    'template',
  );
  const templateId = created.template.id;
  if (kind !== 'no-devices') {
    await ok(
      http('POST', `${svc.base}/device`, { token, body: { label: 'sensor', templates: [templateId], id: 'a1b2c3' } }),
      'device a1b2c3',
    );
    await ok(http('POST', `${svc.base}/device`, { token, body: { label: 'bare', templates: [], id: 'd4e5f6' } }), 'device d4e5f6');
    await ok(http('POST', `${svc.base}/device/gen_psk/a1b2c3?key_length=16&attrs=key`, { token }), 'key');
    // A credential with a known id (its hash matches no secret).
    await svc.service.pool.query(
      "INSERT INTO device_credentials (tenant, device_id, id, type, secret_hash) VALUES ($1, 'a1b2c3', $2, 'password', 'hmac-sha256$AA==')",
      [tenant, CREDENTIAL_ID],
    );
    await insertHistory(svc.service.pool, [
      { tenant, device: 'a1b2c3', attr: 'temperature', ts: '2026-05-01T12:00:00Z', value: '21.5' },
      { tenant, device: 'a1b2c3', attr: 'temperature', ts: '2026-05-01T12:01:00Z', value: '22' },
    ]);
  }
  return { tenant, token, templateId };
}

/** The examples' tenant `acme` (broker hooks: usernames and topics; a user's `service`) is the fixture's tenant. */
function inTenant(v: unknown, tenant: string): unknown {
  if (v === 'acme') return tenant;
  if (typeof v === 'string') return v.replace(/^acme:/, `${tenant}:`).replace(/^\/acme\//, `/${tenant}/`);
  if (Array.isArray(v)) return v.map((x) => inTenant(x, tenant));
  if (v !== null && typeof v === 'object') return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, inTenant(x, tenant)]));
  return v;
}

// (Server-Sent Events too: before, found by an audit, the documented one lacked the stream's opening comment line.)
const STREAMED = new Set(['text/csv', 'application/x-ndjson', 'text/event-stream']);

const examples = () =>
  operationsOf(doc).flatMap((o) =>
    o.op['x-examples'].map((ex) => ({ ...o, ex, title: `${o.method} ${o.path} ${ex.name} -> ${ex.status}` })),
  );

/** The request of an example, as `x-examples` gives it (`request`: path and query parameters, headers, body). */
function request(
  o: DocOperation,
  ex: DocOperation['op']['x-examples'][number],
  f: Fixture,
): { url: string; body: unknown; headers: Record<string, string> } {
  let path = o.path;
  const query = new URLSearchParams();
  for (const p of o.op.parameters) {
    if (p.in === 'path') {
      const given = ex.request.params?.[p.name];
      if (given === undefined) continue;
      // A template id parameter (integer schema) naming the fixture template.
      const value = p.schema.type === 'integer' && Number(given) === FIXTURE_TEMPLATE_ID ? f.templateId : given;
      path = path.replace(`{${p.name}}`, encodeURIComponent(String(value)));
    } else {
      const given = ex.request.query?.[p.name];
      if (given === undefined) continue;
      // A `template` query parameter (GET /history/export) naming the fixture template.
      const value = p.name === 'template' && Number(given) === FIXTURE_TEMPLATE_ID ? f.templateId : given;
      for (const v of Array.isArray(value) ? value : [value]) query.append(p.name, String(v));
    }
  }
  let body = ex.request.body;
  if (body && typeof body === 'object' && Array.isArray((body as { templates?: unknown }).templates)) {
    const b = body as { templates: unknown[] };
    body = { ...b, templates: b.templates.map((t) => (t === FIXTURE_TEMPLATE_ID ? f.templateId : t)) };
  }
  // A template id in a body (`{"template": 1}`, POST /history/latest) naming the fixture template.
  if (body && typeof body === 'object' && (body as { template?: unknown }).template === FIXTURE_TEMPLATE_ID)
    body = { ...body, template: f.templateId };
  body = inTenant(body, f.tenant);
  const qs = query.toString();
  // A bare flag (`?idsOnly`) is written without `=`.
  return { url: path + (qs ? '?' + qs.replace(/=(&|$)/g, '$1') : ''), body, headers: ex.request.headers ?? {} };
}

/**
 * A success body with what differs from one fixture to the next replaced by placeholders:
 * numeric ids (templates and attributes are numbered across tenants), `created`/`updated`/`ts`
 * times, template ids as `attrs` keys and in `templates`, generated keys. Device ids, labels,
 * values, the presence of every field and the order of lists stay as answered.
 */
const FIXTURE_DEVICES = ['a1b2c3', 'd4e5f6', 'c0ffee'];

function comparable(v: unknown, key = ''): unknown {
  if (Array.isArray(v)) return v.map((x) => comparable(x, key === 'templates' ? 'id' : ''));
  if (v !== null && typeof v === 'object') {
    return Object.fromEntries(Object.entries(v).map(([k, x]) => [/^\d+$/.test(k) ? '<template id>' : k, comparable(x, k)]));
  }
  // (Before the numeric rule: a generated device id can be all digits.)
  if (key === 'id' && typeof v === 'string' && /^[0-9a-f]{6}$/.test(v) && !FIXTURE_DEVICES.includes(v)) return '<generated id>';
  if (['id', 'template_id'].includes(key) && /^\d+$/.test(String(v))) return '<numeric id>';
  if (['created', 'updated', 'ts', 'created_at', 'last_used_at'].includes(key)) return '<time>';
  if (key === 'secret') return '<secret>';
  if (key === 'jwt') return '<token>';
  if (key === 'id' && typeof v === 'string' && !FIXTURE_DEVICES.includes(v)) return '<generated id>';
  if (typeof v === 'string' && /^[0-9a-f]{16,}$/.test(v)) return '<key>';
  return v;
}

describe('documented examples against the running service', () => {
  it('there are examples of every operation', () => {
    expect(examples().length).toBeGreaterThan(60);
  });

  it('every example', async () => {
    const failures: string[] = [];
    for (const { ex, title, ...o } of examples()) {
      const f = await fixture(ex.fixture);
      const { url, body, headers } = request(o, ex, f);
      const base = o.op['x-listeners'].includes('public') ? svc.base : svc.internal;
      const res = await http(o.method, base + url, { token: ex.status === 401 ? undefined : f.token, body, headers });
      const documented = o.op.responses[String(res.status)];
      if (res.status !== ex.status) failures.push(`${title}: answered ${res.status} ${res.text.slice(0, 300)}`);
      if (!documented) {
        failures.push(`${title}: status ${res.status} is not documented`);
        continue;
      }
      // The media type whose examples name this one (an answer chosen by Accept), else the first.
      const entries = documented.content ? Object.entries(documented.content) : [];
      const media = entries.find(([, m]) => m.examples?.[ex.name] !== undefined) ?? entries[0];
      if (!media) {
        if (res.text !== '') failures.push(`${title}: a body where none is documented: ${res.text.slice(0, 200)}`);
        continue;
      }
      const [contentType, { schema, examples: answers }] = media;
      if (!res.headers.get('content-type')?.startsWith(contentType))
        failures.push(`${title}: content-type ${res.headers.get('content-type')}, documented ${contentType}`);
      const validate = compile(schema);
      if (!validate(res.body))
        failures.push(
          `${title}: the answer does not fit the documented schema: ${JSON.stringify(validate.errors)} in ${res.text.slice(0, 500)}`,
        );
      // Error bodies are exact: the documented one is the one answered. Success bodies too, but
      // for what the fixture cannot fix: numeric ids, times and keys (see `comparable`).
      const documentedAnswer = inTenant(answers?.[ex.name]?.value, f.tenant);
      // Streamed text (CSV, NDJSON) is exact too.
      if (res.status === ex.status && typeof documentedAnswer === 'string' && STREAMED.has(contentType) && res.text !== documentedAnswer)
        failures.push(`${title}: answered ${JSON.stringify(res.text.slice(0, 1500))}, documented ${JSON.stringify(documentedAnswer)}`);
      // (The document's own example and the metrics text are excerpts.)
      if (res.status === ex.status && documentedAnswer !== undefined && contentType === 'application/json' && o.path !== '/openapi.json') {
        const [got, documented] = res.status >= 400 ? [res.body, documentedAnswer] : [comparable(res.body), comparable(documentedAnswer)];
        try {
          expect(got).toEqual(documented);
        } catch {
          failures.push(`${title}: answered ${res.text.slice(0, 1500)}, documented ${JSON.stringify(documentedAnswer).slice(0, 1500)}`);
        }
      }
    }
    expect(failures, failures.join('\n')).toEqual([]);
    // Some 130 examples, each with a fixture of its own: minutes on a busy machine.
  }, 300_000);
});

describe('answers with the database away', () => {
  it('every example request is answered with a status the document declares for it, in a body that fits its schema', async () => {
    // Before (found by an audit), the broker hooks that look a device's credentials up
    // (emqx/authenticate, vernemq/auth_on_register) answered 503 `Database unavailable`, which
    // their operations did not declare (the document gave unauthenticated operations only the
    // shutdown's 503).
    const f = await fixture(undefined);
    const giveBack = await takeDatabaseAway(svc.env.DATABASE_URL!);
    const failures: string[] = [];
    const statuses = new Set<number>();
    try {
      for (const { ex, title, ...o } of examples()) {
        const { url, body, headers } = request(o, ex, f);
        const base = o.op['x-listeners'].includes('public') ? svc.base : svc.internal;
        const res = await http(o.method, base + url, { token: ex.status === 401 ? undefined : f.token, body, headers });
        statuses.add(res.status);
        const documented = o.op.responses[String(res.status)];
        if (!documented) {
          failures.push(`${title}: answered ${res.status}, not documented: ${res.text.slice(0, 200)}`);
          continue;
        }
        const type = res.headers.get('content-type')?.split(';')[0] ?? '';
        const media = documented.content?.[type];
        if (!media) {
          if (res.text !== '' || documented.content)
            failures.push(
              `${title}: answered ${res.status} ${type}, documented ${Object.keys(documented.content ?? {}).join(', ') || 'no body'}`,
            );
          continue;
        }
        const validate = compile(media.schema);
        if (!validate(type === 'application/json' ? res.body : res.text))
          failures.push(`${title}: answered ${res.status} ${res.text.slice(0, 200)}: ${JSON.stringify(validate.errors)}`);
      }
    } finally {
      await giveBack();
    }
    expect(failures, failures.join('\n')).toEqual([]);
    expect(statuses).toContain(503);
  }, 300_000);
});
