// Every route the service serves, in the order the API description lists them, and the
// services their handlers need (bound at start by src/service.ts). The OpenAPI document is built
// from these declarations (src/openapi/document.ts), by the service and by `npm run openapi`.
import type pg from 'pg';
import type { Tokens } from './auth/tokens.js';
import type { Readiness } from './health.js';
import { authRoutes } from './auth/routes.js';
import type { ReadGate } from './history/read-gate.js';
import { historyRoutes } from './history/routes.js';
import { brokerAuthRoutes } from './http/broker-auth-routes.js';
import { opsRoutes } from './http/ops-routes.js';
import type { RouteSpec } from './http/types.js';
import type { Metrics } from './metrics.js';
import { openApiRoutes } from './openapi/routes.js';
import type { ServedOpenApi } from './openapi/served.js';
import { actuationRoutes } from './registry/actuation/routes.js';
import type { ActuationService } from './registry/actuation/service.js';
import { deviceRoutes, internalDeviceRoutes } from './registry/devices/routes.js';
import type { DeviceService } from './registry/devices/service.js';
import { credentialRoutes } from './registry/credentials/routes.js';
import type { DeviceLogins } from './registry/credentials/logins.js';
import type { CredentialService } from './registry/credentials/service.js';
import { pskRoutes } from './registry/psk/routes.js';
import type { PskService } from './registry/psk/service.js';
import { templateRoutes } from './registry/templates/routes.js';
import { liveRoutes } from './live/routes.js';
import type { TemplateService } from './registry/templates/service.js';

export interface ApiDeps {
  pool: pg.Pool;
  metrics: Metrics;
  readiness: Readiness;
  tokens: Tokens;
  templates: TemplateService;
  devices: DeviceService;
  psk: PskService;
  credentials: CredentialService;
  logins: DeviceLogins;
  actuation: ActuationService;
  historyMaxResults: number;
  historyMaxBuckets: number;
  /** Holds aggregate and latest-value reads while ingest has the CPU (src/history/read-gate.ts). */
  historyReads: ReadGate;
  /** The document GET /openapi.json answers, built from these routes at start. */
  openApi: ServedOpenApi;
}

export const apiRoutes: readonly RouteSpec<ApiDeps>[] = [
  ...opsRoutes,
  ...openApiRoutes,
  ...authRoutes,
  ...templateRoutes,
  ...deviceRoutes,
  ...actuationRoutes,
  ...pskRoutes,
  ...credentialRoutes,
  ...historyRoutes,
  ...liveRoutes,
  ...internalDeviceRoutes,
  ...brokerAuthRoutes,
];
