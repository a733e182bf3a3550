// HTTP side of actuation: the body is read leniently (`json-deferred`) because an unknown
// device answers 404 before a bad body answers 400.
import type { Route } from '../../http/types.js';
import { ACTUATION_SENT, type ActuationService } from './service.js';

export function actuationRoutes(service: ActuationService): Route[] {
  return [
    {
      method: 'PUT',
      path: '/device/:id/actuate',
      body: 'json-deferred',
      async handler(req) {
        await service.actuate(req.tenant, req.params.id!, req.body, req.bodyError);
        return { status: 200, body: ACTUATION_SENT };
      },
    },
  ];
}
