// Pre-shared key endpoints (interface.md §4.3): HTTP in and out.
import type { Route } from '../../http/types.js';
import type { PskService } from './service.js';

/** `attrs=a,b`: the labels; absent or empty: undefined (every psk attribute). */
function labelsOf(raw: string | null): string[] | undefined {
  if (raw === null) return undefined;
  const labels = raw.split(',').map((l) => l.trim()).filter((l) => l !== '');
  return labels.length > 0 ? labels : undefined;
}

export function pskRoutes(psk: PskService): Route[] {
  return [
    {
      method: 'POST',
      path: '/device/gen_psk/:id',
      async handler(req) {
        const keys = await psk.generate(req.tenant, req.params.id!, req.query.get('key_length'), labelsOf(req.query.get('attrs')));
        return keys.length > 0 ? { status: 200, body: keys } : { status: 204 };
      },
    },
    {
      method: 'PUT',
      path: '/device/:id/attrs/:label/psk',
      async handler(req) {
        await psk.copy(req.tenant, req.params.id!, req.params.label!, req.query.get('from_dev_id'), req.query.get('from_attr_label'));
        return { status: 204 };
      },
    },
  ];
}
