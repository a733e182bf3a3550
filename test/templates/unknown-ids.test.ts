// Odd ids on PUT and DELETE /template/{id}: 404 naming the id as given (the body checked
// first), never 500, nothing changed. Works in a fresh tenant.
import { beforeAll, describe, expect, it } from 'vitest';
import type { TemplateView } from '../helpers/api.js';
import { useService } from '../helpers/service.js';
import { asStringId, expectRefused, templateTenant, type TemplateTenant } from './fixtures.js';

const svc = useService();

describe('odd ids on PUT and DELETE /template/{id}: 404, never 500, nothing changed', () => {
  let u: TemplateTenant;
  let t: TemplateView;
  beforeAll(async () => {
    u = await templateTenant(svc, 'edges-ids');
    t = await u.create();
  });

  // [path segment, the id as the message names it (the segment, percent-decoded)]
  const odd = (): Array<[string, string]> => [
    ['99999999999999999999', '99999999999999999999'],
    ['1.5', '1.5'],
    ['%20', ' '],
    ['abc', 'abc'],
    ['0', '0'],
    ['-1', '-1'],
    [`${t.id}.5`, `${t.id}.5`],
    [`-${t.id}`, `-${t.id}`],
    [`${t.id}abc`, `${t.id}abc`],
    [`${t.id}%20`, `${t.id} `],
    [`${t.id}e0`, `${t.id}e0`],
  ];

  it('PUT: 404 No such template: <id>', async () => {
    for (const [segment, shown] of odd()) {
      await expectRefused(
        u,
        () => u.put(segment, { label: 'changed', attrs: [] }),
        { status: 404, body: { message: `No such template: ${shown}`, status: 404 } },
        { unchanged: t, what: `PUT ${segment}` },
      );
    }
  });

  it('PUT with a bad body to an odd id: the body is checked first (400)', async () => {
    for (const [segment] of odd()) {
      const res = await u.put(segment, { attrs: [] });
      expect(res.status, `PUT ${segment}`).toBe(400);
      expect(res.body).toEqual({ message: 'failed to parse input', errors: { label: ['Missing data for required field.'] } });
    }
  });

  it('DELETE: 404 No such template: <id>', async () => {
    for (const [segment, shown] of odd()) {
      await expectRefused(
        u,
        () => u.del(segment),
        { status: 404, body: { message: `No such template: ${shown}`, status: 404 } },
        { unchanged: t, what: `DELETE ${segment}` },
      );
    }
  });

  it('the real id still answers (the 404s above are not for every id)', async () => {
    const res = await u.del(t.id);
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ removed: asStringId(t), result: 'ok' });
  });
});
