// What a device may do with topics, for every broker the service serves: the embedded broker
// (device-auth.ts) and external brokers asking the internal listener (EMQX's authorizer,
// VerneMQ's auth_on_publish/auth_on_subscribe: src/http/broker-auth-routes.ts). One source of
// truth (decisions.md "Device messages (MQTT)"):
//   - publish: only to its own attrs topic, `<tenant>:<id>/attrs` or `/<tenant>/<id>/attrs`;
//   - subscribe: only to its own config topic, in either layout (no wildcards).
import { parseDeviceTopic, sameDevice, type DeviceRef, type DeviceTopic } from '../topics.js';

/** The attrs topic `topic` is, or undefined when it is none (the only topics a device publishes to). */
export function attrsTopic(topic: string): DeviceTopic | undefined {
  const t = parseDeviceTopic(topic);
  return t && t.kind === 'attrs' ? t : undefined;
}

/** The config topic `filter` is, or undefined when it is none (the only topics a device subscribes to). */
export function configTopic(filter: string): DeviceTopic | undefined {
  const t = parseDeviceTopic(filter);
  return t && t.kind === 'config' ? t : undefined;
}

export function mayPublish(device: DeviceRef, topic: string): boolean {
  const t = attrsTopic(topic);
  return t !== undefined && sameDevice(t, device);
}

export function maySubscribe(device: DeviceRef, filter: string): boolean {
  const t = configTopic(filter);
  return t !== undefined && sameDevice(t, device);
}
