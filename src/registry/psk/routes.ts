// Pre-shared key endpoints (interface.md §4.3): HTTP in and out. Queries are checked against
// `psk.generate` / `psk.copy` (src/schemas/queries.ts) before a handler runs.
import type { Route } from '../../http/types.js';
import { labelListOf } from '../../http/query.js';
import type { PskService } from './service.js';

export function pskRoutes(psk: PskService): Route[] {
  return [
    {
      method: 'POST',
      path: '/device/gen_psk/:id',
      // decisions.md: key_length present, then the device (404), then key_length's range.
      queryFailure: 'handler',
      async handler(req) {
        if (req.queryFailure?.keyword === 'required') throw req.queryFailure.error;
        const keyLength = req.queryFailure?.error ?? (req.values.key_length as number);
        const keys = await psk.generate(req.tenant, req.params.id!, keyLength, labelListOf(req.values.attrs));
        return keys.length > 0 ? { status: 200, body: keys } : { status: 204 };
      },
    },
    {
      method: 'PUT',
      path: '/device/:id/attrs/:label/psk',
      async handler(req) {
        await psk.copy(req.tenant, req.params.id!, req.params.label!, req.values.from_dev_id as string, req.values.from_attr_label as string);
        return { status: 204 };
      },
    },
  ];
}
