// Device topics (decisions.md "Device messages (MQTT)"):
//   default mode  `<tenant>:<id>/attrs`, `<tenant>:<id>/config` (the MQTT username is `<tenant>:<id>`)
//   legacy mode   `/<tenant>/<id>/attrs`, `/<tenant>/<id>/config`
// Device ids never contain ':', so a device name splits at its last ':'.

export type TopicKind = 'attrs' | 'config';

export interface DeviceRef {
  tenant: string;
  id: string;
}

export interface DeviceTopic extends DeviceRef {
  kind: TopicKind;
  legacy: boolean;
}

/** The subscription filters of the service: every device's attrs topic, in both layouts. */
export const ATTRS_FILTERS = ['+/attrs', '/+/+/attrs'] as const;

function validPart(s: string): boolean {
  // NUL: MQTT strings may not hold it, and PostgreSQL text cannot.
  return s.length > 0 && !s.includes('+') && !s.includes('#') && !s.includes('\0');
}

/** `<tenant>:<id>` (a default-mode username, a legacy client id, a default topic's first level). */
export function parseDeviceName(name: string): DeviceRef | undefined {
  const i = name.lastIndexOf(':');
  if (i <= 0 || i === name.length - 1) return undefined;
  const tenant = name.slice(0, i);
  const id = name.slice(i + 1);
  if (!validPart(tenant) || !validPart(id) || tenant.includes('/') || id.includes('/')) return undefined;
  return { tenant, id };
}

/** A device's name, `<tenant>:<id>` (what parseDeviceName reads). */
export function deviceName(tenant: string, id: string): string {
  return `${tenant}:${id}`;
}

export function parseDeviceTopic(topic: string): DeviceTopic | undefined {
  if (topic.charCodeAt(0) === 47 /* '/' */) {
    const parts = topic.split('/');
    if (parts.length !== 4) return undefined;
    const [, tenant, id, kind] = parts as [string, string, string, string];
    if ((kind !== 'attrs' && kind !== 'config') || !validPart(tenant) || !validPart(id)) return undefined;
    return { tenant, id, kind, legacy: true };
  }
  const slash = topic.indexOf('/');
  if (slash < 0 || topic.indexOf('/', slash + 1) >= 0) return undefined;
  const kind = topic.slice(slash + 1);
  if (kind !== 'attrs' && kind !== 'config') return undefined;
  const ref = parseDeviceName(topic.slice(0, slash));
  return ref && { ...ref, kind, legacy: false };
}

/** The topics a configuration message is published to: default and legacy layout. */
export function configTopics(tenant: string, id: string): [string, string] {
  return [`${tenant}:${id}/config`, `/${tenant}/${id}/config`];
}

/** The key of a device in caches and shard assignment. */
export function deviceKey(tenant: string, id: string): string {
  return tenant + '/' + id;
}

export function sameDevice(a: DeviceRef, b: DeviceRef): boolean {
  return a.tenant === b.tenant && a.id === b.id;
}
