-- The registry: templates with their attributes (metadata are attributes with a parent),
-- devices, the templates each device is built from, per-device overrides of static values,
-- and pre-shared keys (encrypted). Every table carries the tenant and every key starts with it.
-- Ids of templates and attributes come from global sequences, so an id never names two things.

CREATE SEQUENCE template_ids;
CREATE SEQUENCE attr_ids;

CREATE TABLE templates (
  tenant  text        NOT NULL,
  id      bigint      NOT NULL DEFAULT nextval('template_ids'),
  label   text        NOT NULL,
  created timestamptz NOT NULL DEFAULT now(),
  updated timestamptz,
  PRIMARY KEY (tenant, id)
);

CREATE TABLE template_attrs (
  tenant       text        NOT NULL,
  id           bigint      NOT NULL DEFAULT nextval('attr_ids'),
  template_id  bigint      NOT NULL,
  parent_id    bigint,                 -- set for metadata: the attribute it describes
  label        text        NOT NULL,
  type         text        NOT NULL,
  value_type   text        NOT NULL,
  static_value text,
  created      timestamptz NOT NULL DEFAULT now(),
  updated      timestamptz,
  PRIMARY KEY (tenant, id),
  FOREIGN KEY (tenant, template_id) REFERENCES templates (tenant, id) ON DELETE CASCADE,
  FOREIGN KEY (tenant, parent_id) REFERENCES template_attrs (tenant, id) ON DELETE CASCADE
);
CREATE INDEX template_attrs_template ON template_attrs (tenant, template_id, id);

CREATE TABLE devices (
  tenant  text        NOT NULL,
  id      text        NOT NULL,
  label   text        NOT NULL,
  created timestamptz NOT NULL DEFAULT now(),
  updated timestamptz,
  PRIMARY KEY (tenant, id)
);

CREATE TABLE device_templates (
  tenant      text   NOT NULL,
  device_id   text   NOT NULL,
  template_id bigint NOT NULL,
  PRIMARY KEY (tenant, device_id, template_id),
  FOREIGN KEY (tenant, device_id) REFERENCES devices (tenant, id) ON DELETE CASCADE,
  FOREIGN KEY (tenant, template_id) REFERENCES templates (tenant, id) ON DELETE CASCADE
);
CREATE INDEX device_templates_template ON device_templates (tenant, template_id, device_id);

-- A device's own static_value for an attribute or metadata entry of one of its templates.
CREATE TABLE device_overrides (
  tenant       text   NOT NULL,
  device_id    text   NOT NULL,
  attr_id      bigint NOT NULL,
  static_value text   NOT NULL,
  PRIMARY KEY (tenant, device_id, attr_id),
  FOREIGN KEY (tenant, device_id) REFERENCES devices (tenant, id) ON DELETE CASCADE,
  FOREIGN KEY (tenant, attr_id) REFERENCES template_attrs (tenant, id) ON DELETE CASCADE
);
CREATE INDEX device_overrides_attr ON device_overrides (tenant, attr_id);

-- Pre-shared keys, AES-256-GCM: nonce (12 bytes) || ciphertext || tag (16 bytes).
CREATE TABLE device_psks (
  tenant    text        NOT NULL,
  device_id text        NOT NULL,
  attr_id   bigint      NOT NULL,
  sealed    bytea       NOT NULL,
  created   timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (tenant, device_id, attr_id),
  FOREIGN KEY (tenant, device_id) REFERENCES devices (tenant, id) ON DELETE CASCADE,
  FOREIGN KEY (tenant, attr_id) REFERENCES template_attrs (tenant, id) ON DELETE CASCADE
);
CREATE INDEX device_psks_attr ON device_psks (tenant, attr_id);
