// PUT /device/{id}/actuate: the order of the checks, the exact bodies, the message as the
// device receives it (both topic layouts, QoS 1, not retained) through the run's broker and
// through the embedded broker, tenant isolation, and 503 while the broker is down.
import crypto from 'node:crypto';
import net from 'node:net';
import { Aedes } from 'aedes';
import type mqtt from 'mqtt';
import { beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../../src/net.js';
import type { ErrorBody } from '../helpers/api.js';
import { createDevice, createTemplate, deviceClient, eventually } from '../helpers/registry-fixtures.js';
import { http, login, startTestService, tenantToken, useService } from '../helpers/service.js';

const tenant = `act${crypto.randomBytes(3).toString('hex')}`;
const ATTRS = [
  { label: 'setpoint', type: 'actuator', value_type: 'float' },
  { label: 'mode', type: 'actuator', value_type: 'string' },
  { label: 'temperature', type: 'dynamic', value_type: 'float' },
  { label: 'serial', type: 'static', value_type: 'string', static_value: 'S1' },
];

interface Received {
  topic: string;
  payload: string;
  qos: number;
  retain: boolean;
}

/** Subscribes `client` to `topics` and collects what arrives. */
async function listen(client: mqtt.MqttClient, topics: string[]): Promise<Received[]> {
  const got: Received[] = [];
  client.on('message', (topic, payload, packet) =>
    got.push({ topic, payload: payload.toString(), qos: packet.qos, retain: packet.retain }),
  );
  await client.subscribeAsync(topics, { qos: 1 });
  return got;
}

const SENT = { ' status': 'configuration sent to device' };

describe('through the external broker (MQTT_URL)', () => {
  const svc = useService();
  let token: string;
  let device: string;
  let templateId: number;

  beforeAll(async () => {
    token = await tenantToken(svc.base, svc.token, tenant);
    templateId = await createTemplate(svc.service.pool, tenant, 'thermostat', ATTRS);
    device = await createDevice(svc.service.pool, tenant, [templateId]);
  });

  const actuate = <T = unknown>(id: string, body: unknown, opts: { raw?: string; as?: string; contentType?: string } = {}) =>
    http<T>('PUT', `${svc.base}/device/${id}/actuate`, {
      token: opts.as ?? token,
      ...(opts.raw !== undefined ? { rawBody: opts.raw, headers: { 'content-type': opts.contentType ?? 'application/json' } } : { body }),
    });

  it('200 with the contract body; the device receives the attrs on both config topics, QoS 1, not retained', async () => {
    const dev = await deviceClient(svc.env.MQTT_URL!, { username: `${tenant}:${device}` });
    const got = await listen(dev, [`${tenant}:${device}/config`, `/${tenant}/${device}/config`]);
    const res = await actuate(device, { topic: 'ignored', attrs: { setpoint: 21.5, mode: 'eco' } });
    expect(res.status).toBe(200);
    expect(res.text).toBe('{" status":"configuration sent to device"}');
    await eventually(() => got.length >= 2 || undefined, 'both configuration messages');
    expect(got.sort((a, b) => a.topic.localeCompare(b.topic))).toEqual([
      { topic: `/${tenant}/${device}/config`, payload: '{"setpoint":21.5,"mode":"eco"}', qos: 1, retain: false },
      { topic: `${tenant}:${device}/config`, payload: '{"setpoint":21.5,"mode":"eco"}', qos: 1, retain: false },
    ]);
    await dev.endAsync();
  });

  it('unknown device: 404, checked before the body', async () => {
    for (const res of [await actuate('ffffff', { attrs: { setpoint: 1 } }), await actuate('ffffff', null, { raw: 'not json' })]) {
      expect(res.status).toBe(404);
      expect(res.body).toEqual({ message: 'No such device: ffffff', status: 404 });
    }
    const nul = await actuate('%00', { attrs: { setpoint: 1 } });
    expect([nul.status, nul.body]).toEqual([404, { message: 'No such device: \0', status: 404 }]);
  });

  it.each([
    ['not JSON', { raw: '{"attrs":' }, /Payload must be valid JSON/],
    ['not a JSON Content-Type', { raw: '{"attrs":{}}', contentType: 'text/plain' }, /Payload must be valid JSON/],
    ['an array', { body: [{ setpoint: 1 }] }, /"attrs" object/],
    ['no attrs', { body: { setpoint: 1 } }, /"attrs" object/],
    ['attrs not an object', { body: { attrs: ['setpoint'] } }, /"attrs" object/],
    // (JSON.parse takes it; JSON.stringify's recursion does not: it was a 500)
    [
      'a value nested 20,000 levels deep',
      { raw: `{"attrs":{"setpoint":${'['.repeat(20_000)}1${']'.repeat(20_000)}}}` },
      /nested too deeply/,
    ],
    ['nested 20,000 levels deep as a whole', { raw: `${'['.repeat(20_000)}1${']'.repeat(20_000)}` }, /"attrs" object/],
  ])('a body that is %s: 400', async (_what, input, message) => {
    const res =
      'raw' in input
        ? await actuate<ErrorBody>(device, null, { raw: input.raw, contentType: (input as { contentType?: string }).contentType })
        : await actuate<ErrorBody>(device, input.body);
    expect(res.status).toBe(400);
    expect(res.body.status).toBe(400);
    expect(res.body.message).toMatch(message);
  });

  it.each([
    ['null', null],
    ['a JSON string', 'attrs'],
    ['a number', 5],
    ['empty', {}],
    ['attrs null', { attrs: null }],
    ['attrs a string', { attrs: 'setpoint' }],
    ['attrs an array, with a topic', { attrs: [], topic: '/x/y/config' }],
  ])('a body that is %s: 400 with the exact body (the actuation.body schema)', async (_what, body) => {
    const res = await actuate(device, null, { raw: JSON.stringify(body) });
    expect(res.status).toBe(400);
    expect(res.body).toEqual({
      message: 'The body must be a JSON object with an "attrs" object (attribute label to new value)',
      status: 400,
    });
  });

  it('other body keys are ignored, whatever their value (topic a number, an unknown key)', async () => {
    expect((await actuate(device, { attrs: { setpoint: 19 }, topic: 5, extra: [1] })).body).toEqual(SENT);
  });

  it('labels that are not actuators: 403 listing them, nothing sent', async () => {
    const dev = await deviceClient(svc.env.MQTT_URL!, { username: `${tenant}:${device}` });
    const got = await listen(dev, [`${tenant}:${device}/config`]);
    const res = await actuate(device, { attrs: { setpoint: 1, temperature: 2, serial: 'x', nosuch: 3 } });
    expect(res.status).toBe(403);
    expect(res.body).toEqual({ status: 'some of the attributes are not configurable', attrs: ['temperature', 'serial', 'nosuch'] });
    // A later, valid actuation is the first thing the device sees.
    expect((await actuate(device, { attrs: { mode: 'off' } })).status).toBe(200);
    await eventually(() => got.length >= 1 || undefined, 'the valid message');
    expect(got.map((g) => g.payload)).toEqual(['{"mode":"off"}']);
    await dev.endAsync();
  });

  it('a number beyond a double (1e400, also nested): 400, nothing sent (it was sent as null)', async () => {
    const dev = await deviceClient(svc.env.MQTT_URL!, { username: `${tenant}:${device}` });
    const got = await listen(dev, [`${tenant}:${device}/config`]);
    for (const raw of ['{"attrs":{"setpoint":1e400}}', '{"attrs":{"mode":{"levels":[1,-1e400]}}}']) {
      const res = await actuate(device, null, { raw });
      expect([res.status, res.body]).toEqual([
        400,
        { message: 'An attribute value is a number beyond the range of a double (such as 1e400) and cannot be sent', status: 400 },
      ]);
    }
    // A later, valid actuation is the first thing the device sees.
    expect((await actuate(device, null, { raw: '{"attrs":{"setpoint":1e300}}' })).status).toBe(200);
    await eventually(() => got.length >= 1 || undefined, 'the valid message');
    expect(got.map((g) => g.payload)).toEqual(['{"setpoint":1e+300}']);
    await dev.endAsync();
  });

  it("another tenant's device is unknown; a device with the same id elsewhere gets nothing", async () => {
    const otherTenant = `x${tenant}`;
    const otherToken = await tenantToken(svc.base, svc.token, otherTenant);
    const res = await actuate(device, { attrs: { setpoint: 1 } }, { as: otherToken });
    expect(res.status).toBe(404);
    const t2 = await createTemplate(svc.service.pool, otherTenant, 'thermostat', ATTRS);
    await createDevice(svc.service.pool, otherTenant, [t2], { id: device });
    const spy = await deviceClient(svc.env.MQTT_URL!);
    const got = await listen(spy, [`${otherTenant}:${device}/config`, `/${otherTenant}/${device}/config`]);
    const mine = await deviceClient(svc.env.MQTT_URL!);
    const minesGot = await listen(mine, [`${tenant}:${device}/config`]);
    expect((await actuate(device, { attrs: { setpoint: 5 } })).status).toBe(200);
    await eventually(() => minesGot.length >= 1 || undefined, 'my message');
    expect(got).toEqual([]);
    await spy.endAsync();
    await mine.endAsync();
  });
});

describe('through the embedded broker', () => {
  const svc = useService({ MQTT_URL: undefined });
  let token: string;

  beforeAll(async () => {
    token = await tenantToken(svc.base, svc.token, tenant);
  });

  it('a device subscribed in default mode and one in legacy mode each receive the message', async () => {
    const t = await createTemplate(svc.service.pool, tenant, 'thermostat', ATTRS);
    const a = await createDevice(svc.service.pool, tenant, [t]);
    const b = await createDevice(svc.service.pool, tenant, [t]);
    const url = `mqtt://127.0.0.1:${svc.service.mqttPort}`;
    const devA = await deviceClient(url, { username: `${tenant}:${a}` });
    const devB = await deviceClient(url, { clientId: `${tenant}:${b}` });
    const gotA = await listen(devA, [`${tenant}:${a}/config`]);
    const gotB = await listen(devB, [`/${tenant}/${b}/config`]);
    for (const id of [a, b]) {
      const res = await http('PUT', `${svc.base}/device/${id}/actuate`, { token, body: { attrs: { setpoint: 18 } } });
      expect(res.status).toBe(200);
      expect(res.body).toEqual(SENT);
    }
    await eventually(() => (gotA.length >= 1 && gotB.length >= 1) || undefined, 'both devices');
    expect(gotA).toEqual([{ topic: `${tenant}:${a}/config`, payload: '{"setpoint":18}', qos: 1, retain: false }]);
    expect(gotB).toEqual([{ topic: `/${tenant}/${b}/config`, payload: '{"setpoint":18}', qos: 1, retain: false }]);
    await devA.endAsync();
    await devB.endAsync();
  });
});

describe('broker down', () => {
  it('503 with a clear body while the broker is unreachable; 200 again once it is back', async () => {
    const port = await freePort();
    const startBroker = async () => {
      const broker = await Aedes.createBroker();
      const server = net.createServer(broker.handle);
      await new Promise<void>((r) => server.listen(port, '127.0.0.1', r));
      return () => new Promise<void>((r) => broker.close(() => server.close(() => r())));
    };
    let stopBroker = await startBroker();
    const svc = await startTestService({ MQTT_URL: `mqtt://127.0.0.1:${port}`, ACTUATION_TIMEOUT_MS: '1000' });
    try {
      const tok = await tenantToken(svc.base, await login(svc.base), tenant);
      const t = await createTemplate(svc.service.pool, tenant, 'thermostat', ATTRS);
      const d = await createDevice(svc.service.pool, tenant, [t]);
      const put = () => http('PUT', `${svc.base}/device/${d}/actuate`, { token: tok, body: { attrs: { setpoint: 1 } } });
      expect((await put()).status).toBe(200);
      await stopBroker();
      const down = await eventually(async () => {
        const res = await put();
        return res.status === 503 ? res : undefined;
      }, '503 while the broker is down');
      expect(down.body).toEqual({ message: 'The message broker is not available; the configuration was not sent', status: 503 });
      stopBroker = await startBroker();
      await eventually(async () => (await put()).status === 200 || undefined, '200 once the broker is back');
    } finally {
      await svc.stop();
      await stopBroker();
    }
  });
});
