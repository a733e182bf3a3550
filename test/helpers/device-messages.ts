// Device messages sent through the run broker (MQTT_URL) to the service of a test file, and what
// the tests read after them: the history stored, the `ingest_dropped_total` counters. Register it
// after useService (its beforeAll reads the started service).
import type mqtt from 'mqtt';
import { afterAll, beforeAll, expect } from 'vitest';
import type { HistoryByLabel } from './api.js';
import { http, tenantToken, type ServiceForFile } from './service.js';
import { createDevice, createTemplate, deviceClient, eventually, historyCount, metric, type AttrSpec } from './registry-fixtures.js';

/** The attributes of the template every device gets. */
export const SENSOR_ATTRS: AttrSpec[] = [
  { label: 'temperature', type: 'dynamic', value_type: 'float' },
  { label: 'name', type: 'dynamic', value_type: 'string' },
  { label: 'position', type: 'dynamic', value_type: 'geopoint' },
];

/** The `ingest_dropped_total` sample of `reason` in a /metrics text. */
export const dropped = (text: string, reason: string) => metric(text, `ingest_dropped_total{reason="${reason}"}`);

export interface DeviceMessages {
  /** A device of `tenant` with the sensor template, and a template of `extra` attributes if any. */
  newDevice: (extra?: AttrSpec[]) => Promise<string>;
  /** Publishes to the device's `attrs` topic (QoS 1). */
  send: (device: string, payload: string | Buffer) => Promise<unknown>;
  /** GET /history/device/<device>/history<query> as the tenant's user (expects 200). */
  history: <T = HistoryByLabel>(device: string, query?: string) => Promise<T>;
  /** Waits until `n` values of the device are stored, then reads its history. */
  stored: (device: string, n: number) => Promise<HistoryByLabel>;
  /** The service's /metrics text. */
  metrics: () => Promise<string>;
  /** Waits until `ingest_dropped_total{reason}` reaches `n`. */
  droppedAtLeast: (reason: string, n: number) => Promise<void>;
  /** Lets in-flight metric deltas arrive (the router reports every 250 ms). */
  settle: () => Promise<void>;
}

export function useDeviceMessages(svc: ServiceForFile, tenant: string): DeviceMessages {
  let token: string;
  let publisher: mqtt.MqttClient;
  let templateId: number;

  beforeAll(async () => {
    token = await tenantToken(svc.base, svc.token, tenant);
    templateId = await createTemplate(svc.service.pool, tenant, 'sensor', SENSOR_ATTRS);
    publisher = await deviceClient(svc.env.MQTT_URL!);
  });
  afterAll(() => publisher?.endAsync());

  async function newDevice(extra: AttrSpec[] = []): Promise<string> {
    const templates = [templateId];
    if (extra.length > 0) templates.push(await createTemplate(svc.service.pool, tenant, 'extra', extra));
    return createDevice(svc.service.pool, tenant, templates);
  }

  const send = (device: string, payload: string | Buffer) => publisher.publishAsync(`${tenant}:${device}/attrs`, payload, { qos: 1 });

  async function history<T = HistoryByLabel>(device: string, query = ''): Promise<T> {
    const res = await http<T>('GET', `${svc.base}/history/device/${device}/history${query}`, { token });
    expect(res.status, res.text).toBe(200);
    return res.body;
  }

  async function stored(device: string, n: number): Promise<HistoryByLabel> {
    await eventually(async () => (await historyCount(svc.service.pool, tenant, device)) >= n || undefined, `${n} values of ${device}`);
    return history(device);
  }

  const metrics = async () => (await http('GET', `${svc.base}/metrics`)).text;

  async function droppedAtLeast(reason: string, n: number): Promise<void> {
    await eventually(async () => dropped(await metrics(), reason) >= n || undefined, `${n} ${reason} drops`);
  }

  const settle = () => new Promise<void>((r) => setTimeout(r, 600));

  return { newDevice, send, history, stored, metrics, droppedAtLeast, settle };
}
