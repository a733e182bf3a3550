// PUT /device/{id}/actuate, tenant isolation (interface.md §4.2; decisions.md "Actuation"):
// another tenant's device id is unknown (404, nothing sent), and the same id in two tenants
// names two devices, each receiving only its own tenant's message.
import crypto from 'node:crypto';
import { beforeAll, describe, expect, it } from 'vitest';
import { ATTRS, SENT, quiet, topicsOf, useActuation } from '../helpers/actuation.js';
import { createDevice, createTemplate, eventually } from '../helpers/registry-fixtures.js';
import { tenantToken } from '../helpers/service.js';

const { svc, tenantA, newDeviceOfA, actuate, subscriber } = useActuation();
const tenantB = `aceb${crypto.randomBytes(3).toString('hex')}`;
let tokenB: string;
beforeAll(async () => {
  tokenB = await tenantToken(svc.base, svc.token, tenantB);
});

describe('tenant isolation', () => {
  it("tenant B actuating tenant A's device id: 404, and A's device receives nothing", async () => {
    const d = await newDeviceOfA();
    const a = await subscriber(topicsOf(tenantA, d), { as: `${tenantA}:${d}` });
    for (const body of [{ attrs: { setpoint: 1 } }, { attrs: {} }, { attrs: { setpoint: 2 }, topic: `${tenantA}:${d}/config` }]) {
      const res = await actuate(d, body, tokenB);
      expect(res.status).toBe(404);
      expect(res.body).toEqual({ message: `No such device: ${d}`, status: 404 });
    }
    await quiet();
    expect(a.got).toEqual([]);
    // The subscription works: A's own actuation is the first thing it sees.
    expect((await actuate(d, { attrs: { mode: 'mine' } })).status).toBe(200);
    await eventually(() => a.got.length >= 2 || undefined, "A's own messages");
    expect(a.got.map((g) => g.payload.toString('utf8'))).toEqual(['{"mode":"mine"}', '{"mode":"mine"}']);
  });

  it("B's own device with the same id gets B's message; A's device of that id gets nothing", async () => {
    const d = await newDeviceOfA();
    const templateB = await createTemplate(svc.service.pool, tenantB, 'thermostat', ATTRS);
    await createDevice(svc.service.pool, tenantB, [templateB], { id: d });
    const a = await subscriber(topicsOf(tenantA, d), { as: `${tenantA}:${d}` });
    const b = await subscriber(topicsOf(tenantB, d), { as: `${tenantB}:${d}` });
    const res = await actuate(d, { attrs: { setpoint: 7 } }, tokenB);
    expect([res.status, res.text]).toEqual([200, SENT]);
    await eventually(() => b.got.length >= 2 || undefined, "B's messages");
    await quiet();
    expect(a.got).toEqual([]);
    expect(b.got.map((g) => g.topic).sort()).toEqual([...topicsOf(tenantB, d)].sort());
  });
});
