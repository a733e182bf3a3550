// PUT /device/{id}/actuate, the message as a device gets it (interface.md §6.2;
// docs/messaging.md §7): exactly the JSON of `attrs`, QoS 1, not retained (a subscriber
// arriving later gets nothing).
import { describe, expect, it } from 'vitest';
import { SENT, quiet, topicsOf, useActuation } from '../helpers/actuation.js';
import { deviceClient, eventually } from '../helpers/registry-fixtures.js';
import { http } from '../helpers/service.js';

const { svc, tenantA, clients, newDeviceOfA, actuate, subscriber, tokenA } = useActuation();

describe('the message as the device receives it', () => {
  it('exactly the JSON of attrs (order, unicode, nested values, numbers), QoS 1 even for a QoS 2 subscription', async () => {
    const d = await newDeviceOfA();
    // The 403 check looks at labels only: an actuator's value is sent as given.
    const attrs = { mode: { level: 'héllo ☃ "q"', list: [1, null, true] }, setpoint: 0.30000000000000004 };
    const { got } = await subscriber(topicsOf(tenantA, d), { as: `${tenantA}:${d}`, qos: 2 });
    const res = await http('PUT', `${svc.base}/device/${d}/actuate`, {
      token: tokenA(),
      rawBody: '{ "attrs" : { "mode" : {"level":"h\\u00e9llo ☃ \\"q\\"", "list":[1, null, true]}, "setpoint": 0.30000000000000004 } }',
      headers: { 'content-type': 'application/json' },
    });
    expect([res.status, res.text]).toEqual([200, SENT]);
    await eventually(() => got.length >= 2 || undefined, 'both messages');
    for (const g of got) {
      expect(g.payload.toString('utf8')).toBe(JSON.stringify(attrs));
      expect(g.payload.equals(Buffer.from(JSON.stringify(attrs), 'utf8'))).toBe(true);
      expect(g.qos).toBe(1);
      expect(g.retain).toBe(false);
    }
  });

  it('not retained: a subscriber that connects after the publish receives nothing', async () => {
    const d = await newDeviceOfA();
    const live = await subscriber(topicsOf(tenantA, d), { as: `${tenantA}:${d}` });
    expect((await actuate(d, { attrs: { setpoint: 3 } })).status).toBe(200);
    await eventually(() => live.got.length >= 2 || undefined, 'the live messages');
    expect(live.got.map((g) => g.retain)).toEqual([false, false]);

    // The control: this broker does keep a retained message for a later subscriber.
    const control = `${tenantA}:${d}/retained-control`;
    const publisher = await deviceClient(svc.env.MQTT_URL!);
    clients.push(publisher);
    await publisher.publishAsync(control, 'kept', { qos: 1, retain: true });
    try {
      const late = await subscriber([...topicsOf(tenantA, d), control], { as: `${tenantA}:${d}` });
      await eventually(() => late.got.some((g) => g.topic === control) || undefined, 'the retained control message');
      await quiet();
      expect(late.got.map((g) => [g.topic, g.payload.toString('utf8'), g.retain])).toEqual([[control, 'kept', true]]);
    } finally {
      // An empty retained payload clears it (the machine's Mosquitto persists retained messages).
      await publisher.publishAsync(control, '', { qos: 1, retain: true });
    }
  });
});
