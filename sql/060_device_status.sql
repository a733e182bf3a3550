-- Device status (docs/live.md): when each device's last stored message was received, written in
-- batches by every instance (the newest time wins), and the per-template inactivity timeout
-- after which a device counts as offline (templates.offline_after, seconds; NULL: the service's
-- DEVICE_OFFLINE_AFTER_SECONDS). A device of several templates uses the largest value they set.
CREATE TABLE device_status (
  tenant    text        NOT NULL,
  device_id text        NOT NULL,
  last_seen timestamptz NOT NULL,
  PRIMARY KEY (tenant, device_id),
  FOREIGN KEY (tenant, device_id) REFERENCES devices (tenant, id) ON DELETE CASCADE
);

ALTER TABLE templates ADD COLUMN offline_after integer CHECK (offline_after > 0);
