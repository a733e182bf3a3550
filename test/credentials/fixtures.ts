// Fixtures of the credential tests: a tenant with a token and a template, devices made through
// the API, credentials made through the API, and MQTT logins with them.
import crypto from 'node:crypto';
import mqtt from 'mqtt';
import { http, login, tenantToken, type TestService } from '../helpers/service.js';
import type { DevicesCreated, TemplateCreated } from '../helpers/api.js';

/** What the fixtures need of a service: its public address (and its admin's token, when it has one). */
type Api = Pick<TestService, 'base'> & { readonly token?: string };

export interface Tenant {
  name: string;
  token: string;
  templateId: number;
}

export async function newTenant(svc: Api, prefix = 'cred'): Promise<Tenant> {
  const name = `${prefix}${crypto.randomBytes(3).toString('hex')}`;
  const token = await tenantToken(svc.base, svc.token ?? (await login(svc.base)), name, 'admin');
  const res = await http<TemplateCreated>('POST', `${svc.base}/template`, {
    token,
    body: { label: 'sensor', attrs: [{ label: 'temperature', type: 'dynamic', value_type: 'float' }] },
  });
  if (res.status !== 200) throw new Error(`template: ${res.status} ${res.text}`);
  return { name, token, templateId: res.body.template.id };
}

/** Two tenants of a service with the embedded broker, and that broker's URL: a device's tenant and another. */
export async function twoTenants(
  svc: Api & { readonly service: { readonly mqttPort: number | undefined } },
): Promise<{ a: Tenant; b: Tenant; url: string }> {
  return { a: await newTenant(svc), b: await newTenant(svc), url: `mqtt://127.0.0.1:${svc.service.mqttPort}` };
}

export async function newDevice(svc: Api, t: Tenant): Promise<string> {
  const res = await http<DevicesCreated>('POST', `${svc.base}/device`, {
    token: t.token,
    body: { label: 'dev', templates: [t.templateId] },
  });
  if (res.status !== 200) throw new Error(`device: ${res.status} ${res.text}`);
  return res.body.devices[0]!.id;
}

export interface Created {
  id: string;
  type: string;
  created_at: string;
  expires_at: string | null;
  secret: string;
}

export async function newCredential(svc: Api, t: Tenant, device: string, body: object = { type: 'password' }): Promise<Created> {
  const res = await http<Created>('POST', `${svc.base}/device/${device}/credentials`, { token: t.token, body });
  if (res.status !== 201) throw new Error(`credential: ${res.status} ${res.text}`);
  return res.body;
}

export const deleteCredential = (svc: Api, t: Tenant, device: string, id: string) =>
  http('DELETE', `${svc.base}/device/${device}/credentials/${id}`, { token: t.token });

/** Connects as a device would; rejects with the CONNACK error (its `code`). */
export function connect(url: string, opts: mqtt.IClientOptions = {}): Promise<mqtt.MqttClient> {
  return mqtt.connectAsync(url, {
    protocolVersion: 4,
    reconnectPeriod: 0,
    connectTimeout: 10_000,
    clientId: `dev-${crypto.randomBytes(4).toString('hex')}`,
    ...opts,
  });
}

/** The CONNACK code a login gets (0: accepted; the connection is closed again). */
export async function connackCode(url: string, opts: mqtt.IClientOptions = {}): Promise<number> {
  try {
    const c = await connect(url, opts);
    await c.endAsync(true);
    return 0;
  } catch (err) {
    const code = (err as { code?: unknown }).code;
    if (typeof code !== 'number') throw err;
    return code;
  }
}

/** Value of a Prometheus sample, e.g. `device_logins_refused_total{reason="wrong"}`. */
export async function metricValue(svc: Api, sample: string): Promise<number> {
  const text = (await http('GET', `${svc.base}/metrics`)).text;
  for (const line of text.split('\n')) if (line.startsWith(sample + ' ')) return Number(line.slice(sample.length + 1));
  return 0;
}
