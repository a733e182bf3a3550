-- Indexes for the registry's list endpoints (docs/registry.md has the EXPLAIN reasoning).
-- Labels are compared and sorted in byte order (COLLATE "C") everywhere, so one btree serves
-- sortBy=label and the prefix half of the label filter; reverse(label) serves the suffix half.
CREATE INDEX templates_label ON templates (tenant, label COLLATE "C", id);
CREATE INDEX templates_label_reverse ON templates (tenant, reverse(label) COLLATE "C");
CREATE INDEX devices_label ON devices (tenant, label COLLATE "C", id);
CREATE INDEX devices_label_reverse ON devices (tenant, reverse(label) COLLATE "C");

-- attr=<label>=<value> on templates: the attributes with that label and value, then their templates.
CREATE INDEX template_attrs_label_value ON template_attrs (tenant, label, static_value, template_id) WHERE parent_id IS NULL;

-- attr_type=<x> (type or value_type): a BitmapOr of these two finds rare types at once; for
-- common ones (dynamic, static) the planner prefers a hash semi-join, which they do not slow.
CREATE INDEX template_attrs_type ON template_attrs (tenant, type, template_id) WHERE parent_id IS NULL;
CREATE INDEX template_attrs_value_type ON template_attrs (tenant, value_type, template_id) WHERE parent_id IS NULL;
