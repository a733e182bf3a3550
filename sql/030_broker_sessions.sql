-- The broker sessions of the service instances (src/broker/session-leases.ts). Each running
-- instance holds the lease of one slot of its MQTT_CLIENT_ID: its client ids are
-- <prefix>-0 .. <prefix>-<connections - 1> and <prefix>-actuation, where the prefix is the
-- MQTT_CLIENT_ID itself for slot 0 and <MQTT_CLIENT_ID>.<slot> for the others. An instance renews
-- its lease while it runs; a lease that ran out is the slot of an instance that died (or stopped
-- and kept its sessions for the next one): the next instance to start takes it over and resumes
-- its sessions, or a running instance of the same share group drains them (draining: it
-- connects with those client ids, unsubscribes, takes what the broker had queued, then ends the
-- sessions and deletes the row).
CREATE TABLE broker_sessions (
  prefix text PRIMARY KEY,
  base text NOT NULL,
  slot integer NOT NULL,
  share_group text NOT NULL,
  connections integer NOT NULL,
  -- The process holding the lease (random per process), and its host/pid for people reading this.
  owner uuid NOT NULL,
  holder text NOT NULL,
  draining boolean NOT NULL DEFAULT false,
  lease_until timestamptz NOT NULL,
  UNIQUE (base, slot)
);
