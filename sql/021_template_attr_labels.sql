-- Whether a device has an attribute of a given label (history: a label the device no longer
-- has answers []): device_templates by (tenant, device) then one probe per template here,
-- whatever number of templates in the tenant share the label.
CREATE INDEX template_attrs_template_label ON template_attrs (tenant, template_id, label) WHERE parent_id IS NULL;
