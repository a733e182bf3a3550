// Templates and devices made and read through the public API, for tests whose subject is
// something else: each call must succeed (200), or the test fails here with the answer.
import { expect } from 'vitest';
import type { DeviceBody, DeviceRef, DevicesCreated, DeviceView, TemplateBody, TemplateCreated, TemplateView } from './api.js';
import { http } from './service.js';

/** Creates a template and returns it as POST /template answers it (the id an integer). */
export async function createTemplate(base: string, token: string, body: TemplateBody): Promise<TemplateView> {
  const res = await http<TemplateCreated>('POST', `${base}/template`, { token, body });
  expect(res.status, res.text).toBe(200);
  return res.body.template;
}

/** Creates devices (`?count=n`; one by default) and returns `[{id, label}]`, never empty. */
export async function createDevices(base: string, token: string, body: DeviceBody, query = ''): Promise<[DeviceRef, ...DeviceRef[]]> {
  const res = await http<DevicesCreated<DeviceRef> & { devices: [DeviceRef, ...DeviceRef[]] }>('POST', `${base}/device${query}`, {
    token,
    body,
  });
  expect(res.status, res.text).toBe(200);
  return res.body.devices;
}

/** GET /device/{id}. */
export async function getDevice(base: string, token: string, id: string): Promise<DeviceView> {
  const res = await http<DeviceView>('GET', `${base}/device/${id}`, { token });
  expect(res.status, res.text).toBe(200);
  return res.body;
}
