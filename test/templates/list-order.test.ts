// GET /template?sortBy=label at its edges: equal labels ordered by id, across pages and with a
// label filter; without sortBy, by id. Works in a fresh tenant.
import { beforeAll, describe, expect, it } from 'vitest';
import { useService } from '../helpers/service.js';
import { templateTenant, type TemplateTenant } from './fixtures.js';

const svc = useService();

describe('GET /template?sortBy=label: equal labels are ordered by id ascending', () => {
  let u: TemplateTenant;
  const ids: Record<string, number> = {};

  beforeAll(async () => {
    u = await templateTenant(svc, 'edges-sort');
    // Created in this order (ids ascending): zz, same, a, same, b, same. Then "zz" (the lowest
    // id, but the most recently changed) is renamed to "same": created/updated order and id
    // order of the "same" group then differ.
    ids.zz = (await u.create({ label: 'zz' })).id;
    ids.same1 = (await u.create({ label: 'same' })).id;
    ids.a = (await u.create({ label: 'a' })).id;
    ids.same2 = (await u.create({ label: 'same' })).id;
    ids.b = (await u.create({ label: 'b' })).id;
    ids.same3 = (await u.create({ label: 'same' })).id;
    const renamed = await u.put(ids.zz, { label: 'same' });
    expect(renamed.status, renamed.text).toBe(200);
  });

  it('label ascending, ties by id', async () => {
    const res = await u.list('?sortBy=label');
    expect(res.status).toBe(200);
    expect(res.body.templates.map((t) => [t.label, t.id])).toEqual([
      ['a', ids.a],
      ['b', ids.b],
      ['same', ids.zz],
      ['same', ids.same1],
      ['same', ids.same2],
      ['same', ids.same3],
    ]);
  });

  it('pages cut through the ties without repeating or losing a template', async () => {
    const seen: number[] = [];
    for (let page = 1; page <= 6; page++) {
      const res = await u.list(`?sortBy=label&page_size=1&page_num=${page}`);
      expect(res.status).toBe(200);
      expect(res.body.pagination).toEqual({ page, total: 6, has_next: page < 6, next_page: page < 6 ? page + 1 : null });
      seen.push(...res.body.templates.map((t) => t.id));
    }
    expect(seen).toEqual([ids.a, ids.b, ids.zz, ids.same1, ids.same2, ids.same3]);
    const p2 = await u.list('?sortBy=label&page_size=4&page_num=2');
    expect(p2.body.templates.map((t) => t.id)).toEqual([ids.same2, ids.same3]);
  });

  it('with a label filter, only the ties, still by id', async () => {
    const res = await u.list('?sortBy=label&label=same');
    expect(res.body.templates.map((t) => t.id)).toEqual([ids.zz, ids.same1, ids.same2, ids.same3]);
  });

  it('without sortBy: by id, whatever the labels', async () => {
    const res = await u.list();
    expect(res.body.templates.map((t) => t.id)).toEqual([ids.zz, ids.same1, ids.a, ids.same2, ids.b, ids.same3]);
  });
});
