// Reading the served OpenAPI document in tests: its operations, their examples, and ajv
// validators for the schemas it documents (JSON Schema 2020-12, strict).
import { Ajv2020, type ValidateFunction } from 'ajv/dist/2020.js';
import { queryFormats } from '../../src/schemas/queries.js';

export interface ServerDoc {
  url: string;
  description?: string;
  variables?: Record<string, { default: string }>;
}

export type Doc = {
  info: { title: string; version: string; description: string };
  servers: ServerDoc[];
  /** The requirement every operation has unless it says otherwise. */
  security: unknown;
  paths: Record<string, Record<string, OperationDoc>>;
  components: { schemas: Record<string, unknown>; securitySchemes: Record<string, unknown> };
};

/** An example's request as sent. */
export interface ExampleRequest {
  params?: Record<string, string | number>;
  query?: Record<string, string | number | string[]>;
  headers?: Record<string, string>;
  body?: unknown;
}

export interface ParameterDoc {
  name: string;
  in: 'path' | 'query';
  required: boolean;
  schema: { type?: string };
  examples?: Record<string, { value: unknown }>;
}

export interface MediaDoc {
  schema: unknown;
  examples?: Record<string, { value: unknown }>;
}

export interface OperationDoc {
  operationId: string;
  security?: unknown[];
  'x-listeners': Array<'public' | 'internal'>;
  servers?: ServerDoc[];
  'x-examples': Array<{ name: string; summary: string; status: number; fixture?: string; request: ExampleRequest }>;
  parameters: ParameterDoc[];
  requestBody?: { content: Record<string, MediaDoc> };
  responses: Record<string, { description: string; content?: Record<string, MediaDoc> }>;
}

export interface DocOperation {
  method: string;
  path: string;
  op: OperationDoc;
}

export function operationsOf(doc: Doc): DocOperation[] {
  return Object.entries(doc.paths).flatMap(([path, item]) =>
    Object.entries(item).map(([method, op]) => ({ method: method.toUpperCase(), path, op })),
  );
}

/** Validators for schemas of the document; `#/components/...` references resolve into it. */
export function schemaValidators(doc: Doc): (schema: unknown) => ValidateFunction {
  const ajv = new Ajv2020({ strict: true, allErrors: true, allowUnionTypes: true, formats: queryFormats });
  ajv.addKeyword('components');
  ajv.addSchema({ $id: 'https://device-registry.local/openapi.json', components: doc.components });
  const rebase = (v: unknown): unknown => {
    if (Array.isArray(v)) return v.map(rebase);
    if (typeof v !== 'object' || v === null) return v;
    return Object.fromEntries(
      Object.entries(v).map(([k, x]) => [
        k,
        k === '$ref' && typeof x === 'string' && x.startsWith('#/') ? `https://device-registry.local/openapi.json${x}` : rebase(x),
      ]),
    );
  };
  const cache = new Map<unknown, ValidateFunction>();
  return (schema) => {
    let fn = cache.get(schema);
    if (!fn) cache.set(schema, (fn = ajv.compile(rebase(schema) as object)));
    return fn;
  };
}
