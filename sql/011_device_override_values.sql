-- attr=<label>=<value> on devices with few matches: the overrides of the attributes with that
-- label and that value (e.g. a serial number set per device), without reading every override.
CREATE INDEX device_overrides_attr_value ON device_overrides (tenant, attr_id, static_value, device_id);
