import { describe, expect, it } from 'vitest';
import type { TemplateList } from '../helpers/api.js';
import { countOf } from '../helpers/db.js';
import { createTemplate } from '../helpers/registry-api.js';
import { http, useService } from '../helpers/service.js';
import { sensorBody } from './fixtures.js';

const svc = useService();

describe('DELETE /template/{id}', () => {
  it('removes the template: {removed, result} with a string id', async () => {
    const t = await createTemplate(svc.base, svc.token, sensorBody());
    const res = await http('DELETE', `${svc.base}/template/${t.id}`, { token: svc.token });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ removed: { ...t, id: String(t.id) }, result: 'ok' });
    expect((await http('GET', `${svc.base}/template/${t.id}`, { token: svc.token })).status).toBe(404);
    expect(await countOf(svc.service.pool, 'SELECT count(*)::int AS n FROM template_attrs WHERE template_id = $1', [t.id])).toBe(0);
  });

  it.each(['999999', 'abc'])('unknown id %s: 404', async (id) => {
    const res = await http('DELETE', `${svc.base}/template/${id}`, { token: svc.token });
    expect(res.status).toBe(404);
    expect(res.body).toEqual({ message: `No such template: ${id}`, status: 404 });
  });
});

describe('DELETE /template', () => {
  it('removes every template: {removed: [...], result} with string ids', async () => {
    const a = await createTemplate(svc.base, svc.token, { label: 'a' });
    const b = await createTemplate(svc.base, svc.token, sensorBody());
    const res = await http('DELETE', `${svc.base}/template`, { token: svc.token });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({
      removed: [
        { ...a, id: String(a.id) },
        { ...b, id: String(b.id) },
      ],
      result: 'ok',
    });
    expect((await http<TemplateList>('GET', `${svc.base}/template`, { token: svc.token })).body.templates).toEqual([]);
  });

  it('with nothing to remove: an empty list', async () => {
    const res = await http('DELETE', `${svc.base}/template`, { token: svc.token });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ removed: [], result: 'ok' });
  });

  it('never removes a template a device was being created from meanwhile (both 200 before)', async () => {
    // Before (found by an audit): a template created after DELETE /template read the tenant's
    // templates was not locked; a device being created from it was not yet visible to the in-use
    // check; the deletion waited for that creation, then removed the template under the new
    // device: both answered 200 and the device was left with no template. Made certain here: an
    // open transaction holds template `y` (as a slow request would), so the deletion waits there;
    // the device creation from `x` is held at its insert by an uncommitted row of the same id.
    const { tenant, token } = await svc.freshTenant('delall');
    const pool = svc.service.pool;
    const waiting = () =>
      countOf(pool, "SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'");
    const until = async (n: number) => {
      for (let i = 0; i < 500 && (await waiting()) < n; i++) await new Promise((r) => setTimeout(r, 10));
      expect(await waiting()).toBeGreaterThanOrEqual(n);
    };
    const y = await createTemplate(svc.base, token, { label: 'y' });
    const holdY = await pool.connect();
    const holdInsert = await pool.connect();
    try {
      await holdY.query('BEGIN');
      await holdY.query('SELECT 1 FROM templates WHERE tenant = $1 AND id = $2 FOR SHARE', [tenant, y.id]);
      const deleting = http('DELETE', `${svc.base}/template`, { token });
      await until(1);
      const x = await createTemplate(svc.base, token, { label: 'x', attrs: [{ label: 't', type: 'dynamic', value_type: 'float' }] });
      await holdInsert.query('BEGIN');
      await holdInsert.query("INSERT INTO devices (tenant, id, label) VALUES ($1, 'abc123', 'held')", [tenant]);
      const creating = http('POST', `${svc.base}/device`, { token, body: { id: 'abc123', label: 'on-x', templates: [x.id] } });
      await until(2);
      await holdY.query('ROLLBACK');
      await new Promise((r) => setTimeout(r, 200));
      await holdInsert.query('ROLLBACK');
      const [deleted, created] = await Promise.all([deleting, creating]);
      expect(created.status).toBe(200);
      // One order a client could see: the deletion first (only `y`), then `x` and its device.
      expect(deleted.status).toBe(200);
      expect((deleted.body as { removed: Array<{ id: string }> }).removed.map((t) => t.id)).toEqual([String(y.id)]);
      const device = await http<{ templates: string[] }>('GET', `${svc.base}/device/abc123`, { token });
      expect(device.body.templates).toEqual([String(x.id)]);
      expect((await http('GET', `${svc.base}/template/${x.id}`, { token })).status).toBe(200);
    } finally {
      await holdY.query('ROLLBACK').catch(() => undefined);
      await holdInsert.query('ROLLBACK').catch(() => undefined);
      holdY.release();
      holdInsert.release();
    }
  });
});
