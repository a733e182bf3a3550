// Every JSON Schema of the API, by area: request bodies (compiled once when the validator
// loads), queries (src/schemas/queries.ts, compiled at start with the configured limits) and
// response shapes (src/schemas/responses.ts, error bodies from src/schemas/errors.ts). The
// OpenAPI document (src/openapi/document.ts) is generated from them.
import { authSchemas } from './auth.js';
import { templateSchemas } from './templates.js';
import { deviceSchemas } from './devices.js';
import { actuationSchemas } from './actuation.js';

export interface NamedSchema {
  $id: string;
  [key: string]: unknown;
}

/** Request bodies. */
export const bodySchemas: NamedSchema[] = [...authSchemas, ...templateSchemas, ...deviceSchemas, ...actuationSchemas];
