// Every JSON Schema of the API, by area. Add an area's schemas here; the validator compiles
// them once at start, and the OpenAPI document is generated from them.
import { authSchemas } from './auth.js';
import { templateSchemas } from './templates.js';
import { deviceSchemas } from './devices.js';

export interface NamedSchema {
  $id: string;
  [key: string]: unknown;
}

export const allSchemas: NamedSchema[] = [...authSchemas, ...templateSchemas, ...deviceSchemas];
