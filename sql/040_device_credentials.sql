-- Device credentials: who may log in to the broker as a device (docs/credentials.md). A secret is
-- never stored, only its hash: a keyed hash (HMAC-SHA256 under the service's credential key,
-- bound to the row's tenant, device and id) for secrets the service generated, a salted slow
-- hash (scrypt) for secrets a client chose. A dump of this table logs no device in.
CREATE TABLE device_credentials (
  tenant      text        NOT NULL,
  device_id   text        NOT NULL,
  id          uuid        NOT NULL,
  type        text        NOT NULL,
  secret_hash text        NOT NULL,   -- `hmac-sha256$<b64>` or `scrypt$N$r$p$<salt b64>$<hash b64>`
  created     timestamptz NOT NULL DEFAULT now(),
  expires     timestamptz,
  last_used   timestamptz,
  -- The shipped Mosquitto (dynamic-security plugin) holds one password per device: this row's.
  in_broker   boolean     NOT NULL DEFAULT false,
  PRIMARY KEY (tenant, device_id, id),
  FOREIGN KEY (tenant, device_id) REFERENCES devices (tenant, id) ON DELETE CASCADE
);
CREATE INDEX device_credentials_in_broker ON device_credentials (tenant, device_id) WHERE in_broker;
