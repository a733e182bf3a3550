// The broker link: how device messages come in over MQTT and configuration messages go out.
// Two implementations: the embedded broker (embedded.ts: aedes with device authorisation) and
// an external broker (external.ts: MQTT_URL). The broker side knows devices, topics and
// connections, never what becomes of a message: it hands every message it takes to an Inbox
// (ingest) together with an ack handle, and the message stays the broker's business
// (unacknowledged, delivered again after a crash) until ingest uses that handle.
import type { RegistryEvent } from '../registry/events.js';

/**
 * Acknowledges one message to the broker: its PUBACK goes out (QoS 1; nothing for QoS 0) and
 * the broker forgets it. The link makes one handle per message, bound to that message alone: a
 * second call, or a call after the message's connection is gone, sends nothing.
 */
export interface AckHandle {
  ack(): void;
}

/** The largest MQTT packet (bytes) that may carry a payload of MAX_MESSAGE_BYTES. */
export function maxPacketBytes(maxMessageBytes: number): number {
  // Room for the largest topic (65,535 bytes) and MQTT 5 properties beside the payload; a
  // packet up to this size whose payload is too large is the inbox's to refuse. MQTT's own
  // limit is 2^28 - 1 bytes.
  return Math.min(maxMessageBytes + PACKET_OVERHEAD_BYTES, MQTT_MAX_PACKET_BYTES);
}

const PACKET_OVERHEAD_BYTES = 128 * 1024;
const MQTT_MAX_PACKET_BYTES = 268_435_455;

/** The handle of a message that needs no acknowledgement (QoS 0, or a connection already closed). */
export const NO_ACK: AckHandle = { ack() {} };

/** What the link took from the broker but cannot hand over as a device message. */
export type Unreadable =
  /** Published on a topic that is not a device's attrs topic (the external broker's subscription is wide). */
  | 'not_a_device_topic'
  /** A packet announcing more bytes than the embedded broker reads: its connection is closed unread. */
  | 'packet_too_large';

/**
 * Where the link hands over every message (implemented by ingest). Each message comes in once,
 * by one of the two calls, and its handle must be used exactly once: after the commit, or when
 * the message is dropped for good.
 */
export interface Inbox {
  /** A device's attrs message. `payload` may be a view into a socket buffer: copy it during the call. */
  accept(tenant: string, id: string, payload: Uint8Array, ack: AckHandle): void;
  /** A message that is no device message. */
  refuse(why: Unreadable, ack: AckHandle): void;
}

/** The link's own connections to the broker (for readiness and metrics). */
export interface LinkState {
  /** Device messages can come in and configuration messages go out. */
  up: boolean;
  /** Of the link's connections (external: the subscribers and the publisher; embedded: its listener), how many are connected. */
  connected: number;
  connections: number;
  /** How often the link's subscriber connections lost the broker and connected again, since the link started. */
  reconnects?: number;
}

/** A running broker link, as the ingest router thread uses it. */
export interface BrokerLink {
  /** The embedded broker's port; undefined for an external broker. */
  readonly mqttPort: number | undefined;
  /** The embedded broker's TLS port (MQTT_TLS_CERT); undefined otherwise. */
  readonly mqttTlsPort?: number | undefined;
  /** Stop / restart reading device messages (ingest backpressure, shutdown); acks still go out. */
  pause(): void;
  resume(): void;
  /**
   * The registry changed: what the link cached of those devices is dropped, and a removed
   * device's connections are closed (embedded broker; an external broker's sessions are its own).
   */
  registryChanged(event: RegistryEvent): void;
  /** Publishes QoS 1, not retained, to every topic; resolves once the broker accepted all. */
  publish(topics: string[], payload: string): Promise<void>;
  state(): LinkState;
  /**
   * Shutdown: no new device connections, and no new messages taken from the connected ones
   * (embedded broker: they stay unacknowledged and are sent again to the next instance; an
   * external broker keeps them once the link is paused).
   */
  stopAccepting(): void;
  /**
   * Shutdown, next: true if the link left the broker's share group to other instances and reads
   * on (`settled` then tells when the broker has handed over all it held for this instance);
   * false if it keeps its sessions, and the caller pauses it. Absent: false.
   */
  leave?(): Promise<boolean>;
  settled?(): Promise<void>;
  close(): Promise<void>;
}
