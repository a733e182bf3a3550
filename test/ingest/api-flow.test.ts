// The whole flow through the public API and the embedded broker: a template and a device
// created over HTTP, telemetry stored, a template change picked up by the ingest caches at
// once (the registry's own event), actuation received, and the device's deletion closing its
// MQTT session.
import crypto from 'node:crypto';
import { beforeAll, describe, expect, it } from 'vitest';
import type { DevicesCreated, HistoryRecord, TemplateCreated } from '../helpers/api.js';
import { anyString } from '../helpers/matchers.js';
import { http, tenantToken, useService } from '../helpers/service.js';
import { closedByPeer, deviceClient, eventually } from '../helpers/registry-fixtures.js';

const svc = useService({ MQTT_URL: undefined });
let token: string;
const tenant = `flow${crypto.randomBytes(3).toString('hex')}`;

beforeAll(async () => {
  token = await tenantToken(svc.base, svc.token, tenant);
});

describe('through the public API', () => {
  it('template and device over HTTP, telemetry, template change, actuation, deletion', async () => {
    const attrs = [
      { label: 'temperature', type: 'dynamic', value_type: 'float' },
      { label: 'setpoint', type: 'actuator', value_type: 'float' },
    ];
    const t = await http<TemplateCreated>('POST', `${svc.base}/template`, { token, body: { label: 'thermostat', attrs } });
    expect(t.status).toBe(200);
    const templateId = t.body.template.id;
    const d = await http<DevicesCreated>('POST', `${svc.base}/device`, { token, body: { label: 'living-room', templates: [templateId] } });
    expect(d.status).toBe(200);
    const id: string = d.body.devices[0]!.id;

    const url = `mqtt://127.0.0.1:${svc.service.mqttPort}`;
    const device = await deviceClient(url, { username: `${tenant}:${id}` });
    const got: string[] = [];
    device.on('message', (_topic, payload) => got.push(payload.toString()));
    await device.subscribeAsync(`${tenant}:${id}/config`, { qos: 1 });

    await device.publishAsync(`${tenant}:${id}/attrs`, JSON.stringify({ temperature: 20.5, humidity: 40 }), { qos: 1 });
    const first = await http('GET', `${svc.base}/history/device/${id}/history?lastN=5`, { token });
    expect(first.status).toBe(200);
    expect(first.body).toEqual({
      temperature: [{ device_id: id, ts: anyString(), value: 20.5, attr: 'temperature' }],
      setpoint: [],
    });

    // The template gains an attribute: the registry's event reaches the shard caches.
    const updated = await http('PUT', `${svc.base}/template/${templateId}`, {
      token,
      body: { label: 'thermostat', attrs: [...attrs, { label: 'humidity', type: 'dynamic', value_type: 'integer' }] },
    });
    expect(updated.status).toBe(200);
    await device.publishAsync(`${tenant}:${id}/attrs`, JSON.stringify({ humidity: 41 }), { qos: 1 });
    expect(
      (await http<HistoryRecord[]>('GET', `${svc.base}/history/device/${id}/history?attr=humidity`, { token })).body.map((r) => r.value),
    ).toEqual([41]);

    const act = await http('PUT', `${svc.base}/device/${id}/actuate`, { token, body: { attrs: { setpoint: 19 } } });
    expect(act.status).toBe(200);
    await eventually(() => got.length > 0 || undefined, 'the configuration message');
    expect(got).toEqual(['{"setpoint":19}']);

    const closed = closedByPeer(device);
    expect((await http('DELETE', `${svc.base}/device/${id}`, { token })).status).toBe(200);
    await closed;
    device.end(true);
    expect((await http('GET', `${svc.base}/history/device/${id}/history`, { token })).status).toBe(404);
  });
});
