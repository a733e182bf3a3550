// PUT /device/{id}/actuate, the body (interface.md §4.2, §6.2; decisions.md "Actuation"):
// an empty `attrs` is 200 and sends `{}`, and a `topic` in the body is ignored, even when it
// names another device's config topic (the message goes to the device's own config topics only).
import { describe, expect, it } from 'vitest';
import { SENT, quiet, topicsOf, useActuation } from '../helpers/actuation.js';
import { createDevice, createTemplate, eventually } from '../helpers/registry-fixtures.js';

const { svc, tenantA, newDeviceOfA, actuate, subscriber } = useActuation();

describe('the body', () => {
  it('{"attrs": {}}: nothing in it is not configurable, so 200 and the device receives {} on both config topics', async () => {
    const d = await newDeviceOfA();
    const { got } = await subscriber(topicsOf(tenantA, d), { as: `${tenantA}:${d}` });
    const res = await actuate(d, { attrs: {} });
    expect(res.status).toBe(200);
    expect(res.text).toBe(SENT);
    await eventually(() => got.length >= 2 || undefined, 'both messages');
    await quiet();
    expect(got.map((g) => [g.topic, g.payload.toString('utf8'), g.qos, g.retain]).sort()).toEqual(
      [...topicsOf(tenantA, d)].sort().map((t) => [t, '{}', 1, false]),
    );
  });

  it('{"attrs": {}} on a device without any actuator attribute: 200 too (no label is refused)', async () => {
    const bare = await createTemplate(svc.service.pool, tenantA, 'sensor', [
      { label: 'temperature', type: 'dynamic', value_type: 'float' },
    ]);
    const d = await createDevice(svc.service.pool, tenantA, [bare]);
    const { got } = await subscriber([`${tenantA}:${d}/config`]);
    const res = await actuate(d, { attrs: {} });
    expect([res.status, res.text]).toEqual([200, SENT]);
    await eventually(() => got.length >= 1 || undefined, 'the message');
    expect(got[0]!.payload.toString('utf8')).toBe('{}');
    // while a label is still refused there
    const refused = await actuate(d, { attrs: { temperature: 1 } });
    expect(refused.status).toBe(403);
    expect(refused.body).toEqual({ status: 'some of the attributes are not configurable', attrs: ['temperature'] });
  });

  it('"topic" is ignored: the message goes to the device\'s own config topics only, not to the topic named', async () => {
    const d = await newDeviceOfA();
    const other = await newDeviceOfA();
    const own = await subscriber(topicsOf(tenantA, d), { as: `${tenantA}:${d}` });
    const named = await subscriber(['x', '/x', `${tenantA}:${d}/x`, ...topicsOf(tenantA, other)]);
    const sent: string[] = [];
    for (const topic of ['x', `${tenantA}:${other}/config`, `/${tenantA}/${other}/config`]) {
      own.got.length = 0;
      const value = Math.round(Math.random() * 1e6) / 100;
      sent.push(JSON.stringify({ setpoint: value }));
      const res = await actuate(d, { attrs: { setpoint: value }, topic });
      expect([res.status, res.text], topic).toEqual([200, SENT]);
      await eventually(() => own.got.length >= 2 || undefined, `both messages (topic ${topic})`);
      expect(own.got.map((g) => g.topic).sort(), topic).toEqual([...topicsOf(tenantA, d)].sort());
      for (const g of own.got) expect(g.payload.toString('utf8'), topic).toBe(JSON.stringify({ setpoint: value }));
    }
    await quiet();
    // (`x` and `/x` are open to anyone on a shared broker: only this test's messages count.)
    expect(named.got.filter((g) => sent.includes(g.payload.toString('utf8'))).map((g) => g.topic)).toEqual([]);
    expect(named.got.filter((g) => g.topic !== 'x' && g.topic !== '/x')).toEqual([]);
  });

  it('"topic" does not make a bad body good: {"topic": "x"} alone is still 400', async () => {
    const d = await newDeviceOfA();
    const res = await actuate(d, { topic: `${tenantA}:${d}/config` });
    expect(res.status).toBe(400);
    expect(res.body).toEqual({
      message: 'The body must be a JSON object with an "attrs" object (attribute label to new value)',
      status: 400,
    });
  });
});
