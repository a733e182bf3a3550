// The broker link as the ingest router thread sees it: the embedded broker (aedes, with
// device authorisation) or an external one (MQTT_URL). Both feed the router and publish
// configuration messages.
import type { RegistryEvent } from '../registry/events.js';

export interface BrokerLink {
  /** The embedded broker's port; undefined for an external broker. */
  readonly mqttPort: number | undefined;
  /** Stop / restart reading device messages (router backpressure, shutdown). */
  pause(): void;
  resume(): void;
  /** Publishes QoS 1, not retained, to every topic; resolves once the broker accepted all. */
  publish(topics: string[], payload: string): Promise<void>;
  /** Registry changes: caches drop entries; a removed device's sessions are closed (embedded broker). */
  onRegistryEvent(event: RegistryEvent): void;
  /** Shutdown: no new connections (embedded broker). */
  stopAccepting(): void;
  close(): Promise<void>;
}

/** The broker did not take a configuration message (down, or no acknowledgement in time). */
export class BrokerUnavailable extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'BrokerUnavailable';
  }
}
