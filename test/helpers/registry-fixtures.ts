// Registry fixtures for the messaging tests: templates, devices and history rows written with
// direct SQL (the tests of this area do not depend on the device API), plus the registry event
// a real change would publish, and small MQTT and polling helpers.
import crypto from 'node:crypto';
import mqtt from 'mqtt';
import type pg from 'pg';
import type { RegistryEvent } from '../../src/registry/events.js';

export interface AttrSpec {
  label: string;
  type: string;
  value_type: string;
  static_value?: string;
}

type Db = Pick<pg.Pool, 'query'>;

/** Something that publishes registry events: the in-process service's `events`, or NOTIFY. */
export interface EventSink {
  publish(event: RegistryEvent): Promise<void>;
}

/** Registry events through PostgreSQL NOTIFY, for a service running in another process. */
export function notifySink(db: Db): EventSink {
  return {
    async publish(event) {
      await db.query('SELECT pg_notify($1, $2)', ['registry_events', JSON.stringify({ origin: 'test-fixture', event })]);
    },
  };
}

export async function createTemplate(db: Db, tenant: string, label: string, attrs: AttrSpec[]): Promise<number> {
  const { rows } = await db.query<{ id: string }>('INSERT INTO templates (tenant, label) VALUES ($1, $2) RETURNING id', [tenant, label]);
  const id = Number(rows[0]!.id);
  for (const a of attrs) {
    await db.query(
      'INSERT INTO template_attrs (tenant, template_id, label, type, value_type, static_value) VALUES ($1, $2, $3, $4, $5, $6)',
      [tenant, id, a.label, a.type, a.value_type, a.static_value ?? null],
    );
  }
  return id;
}

/** Adds attributes to an existing template and tells the caches. */
export async function addTemplateAttrs(db: Db, events: EventSink, tenant: string, templateId: number, attrs: AttrSpec[]): Promise<void> {
  for (const a of attrs) {
    await db.query(
      'INSERT INTO template_attrs (tenant, template_id, label, type, value_type, static_value) VALUES ($1, $2, $3, $4, $5, $6)',
      [tenant, templateId, a.label, a.type, a.value_type, a.static_value ?? null],
    );
  }
  await events.publish({ type: 'templates.changed', tenant, templateIds: [templateId] });
}

export function randomDeviceId(): string {
  return crypto.randomBytes(3).toString('hex');
}

/** A device built from templates; `overrides` maps attribute labels to the device's static_value. */
export async function createDevice(
  db: Db,
  tenant: string,
  templateIds: number[],
  opts: { id?: string; label?: string; overrides?: Record<string, string>; events?: EventSink } = {},
): Promise<string> {
  const id = opts.id ?? randomDeviceId();
  await db.query('INSERT INTO devices (tenant, id, label) VALUES ($1, $2, $3)', [tenant, id, opts.label ?? `dev-${id}`]);
  for (const t of templateIds)
    await db.query('INSERT INTO device_templates (tenant, device_id, template_id) VALUES ($1, $2, $3)', [tenant, id, t]);
  for (const [label, value] of Object.entries(opts.overrides ?? {})) {
    await db.query(
      `INSERT INTO device_overrides (tenant, device_id, attr_id, static_value)
       SELECT $1, $2, a.id, $4 FROM template_attrs a WHERE a.tenant = $1 AND a.template_id = ANY($3::bigint[]) AND a.label = $5`,
      [tenant, id, templateIds, value, label],
    );
  }
  await opts.events?.publish({ type: 'devices.changed', tenant, deviceIds: [id] });
  return id;
}

/** Many devices of one template in one statement (benchmarks, cache tests). */
export async function createDevices(db: Db, tenant: string, templateId: number, ids: string[]): Promise<void> {
  await db.query(`INSERT INTO devices (tenant, id, label) SELECT $1, i, 'dev-' || i FROM unnest($2::text[]) AS i`, [tenant, ids]);
  await db.query(`INSERT INTO device_templates (tenant, device_id, template_id) SELECT $1, i, $3 FROM unnest($2::text[]) AS i`, [
    tenant,
    ids,
    templateId,
  ]);
}

export async function removeDevice(db: Db, events: EventSink, tenant: string, id: string): Promise<void> {
  await db.query('DELETE FROM devices WHERE tenant = $1 AND id = $2', [tenant, id]);
  await events.publish({ type: 'devices.removed', tenant, deviceIds: [id] });
}

/** History rows written directly (history query tests); `value` is JSON text. */
export async function insertHistory(
  db: Db,
  rows: Array<{ tenant: string; device: string; attr: string; ts: string; value: string }>,
): Promise<void> {
  await db.query(`SELECT history_ensure_partition(t) FROM (SELECT DISTINCT unnest($1::timestamptz[]) AS t) s`, [rows.map((r) => r.ts)]);
  await db.query(
    `INSERT INTO history (tenant, device_id, attr, series, ts, value)
     SELECT t, d, a, history_series(t, d, a), ts, v FROM unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[], $5::text[]) AS r(t, d, a, ts, v)`,
    [rows.map((r) => r.tenant), rows.map((r) => r.device), rows.map((r) => r.attr), rows.map((r) => r.ts), rows.map((r) => r.value)],
  );
}

export async function historyCount(db: Db, tenant: string, device?: string): Promise<number> {
  const { rows } = await db.query<{ n: string }>(
    device === undefined
      ? 'SELECT count(*) AS n FROM history WHERE tenant = $1'
      : 'SELECT count(*) AS n FROM history WHERE tenant = $1 AND device_id = $2',
    device === undefined ? [tenant] : [tenant, device],
  );
  return Number(rows[0]!.n);
}

/**
 * Polls `check` until it returns (or resolves to) a value other than `undefined` or `false` (not a
 * timing assertion: a deadline for a hang). `check` may be synchronous when it only reads state.
 */
export async function eventually<T>(
  check: () => T | undefined | false | Promise<T | undefined | false>,
  what: string,
  timeoutMs = 20_000,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const v = await check();
      if (v !== undefined && v !== false) return v;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline) throw new Error(`gave up waiting for ${what}${last ? `: ${(last as Error).message}` : ''}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** An MQTT client as a device would be (mqtt.js, MQTT 3.1.1 unless asked otherwise). */
export async function deviceClient(url: string, opts: mqtt.IClientOptions = {}): Promise<mqtt.MqttClient> {
  return mqtt.connectAsync(url, {
    protocolVersion: 4,
    reconnectPeriod: 0,
    connectTimeout: 5000,
    clientId: `dev-${crypto.randomBytes(4).toString('hex')}`,
    ...opts,
  });
}

/** Waits for the client to be closed by the other side. */
export function closedByPeer(client: mqtt.MqttClient, timeoutMs = 10_000): Promise<void> {
  return new Promise((resolve, reject) => {
    if (!client.connected) return resolve();
    const timer = setTimeout(() => reject(new Error('the broker did not close the connection')), timeoutMs);
    client.once('close', () => {
      clearTimeout(timer);
      resolve();
    });
  });
}

/** Value of a Prometheus sample, e.g. `ingest_dropped_total{reason="not_json"}`. */
export function metric(text: string, sample: string): number {
  for (const line of text.split('\n')) {
    if (line.startsWith(sample + ' ')) return Number(line.slice(sample.length + 1));
  }
  return 0;
}

/** SUBACK return codes for `topics` (QoS 1 asked), refused ones (128) included. */
export async function subscribeCodes(client: mqtt.MqttClient, topics: string[]): Promise<number[]> {
  try {
    const granted = await client.subscribeAsync(topics, { qos: 1 });
    return granted.map((g) => g.qos);
  } catch (err) {
    const packet = (err as { packet?: { granted?: Array<number | { qos: number }> } }).packet;
    if (!packet?.granted) throw err;
    return packet.granted.map((g) => (typeof g === 'number' ? g : g.qos));
  }
}
