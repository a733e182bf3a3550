// HTTP side of actuation: the body is read leniently (`json-deferred`) because an unknown
// device answers 404 before a bad body answers 400.
import type { RouteSpec } from '../../http/types.js';
import { DEV, err } from '../../openapi/examples.js';
import { actuationBody } from '../../schemas/actuation.js';
import { deviceIdParam } from '../../schemas/params.js';
import { ACTUATION_SENT, type ActuationService } from './service.js';

export const actuationRoutes: RouteSpec<{ actuation: ActuationService }>[] = [
  {
    method: 'PUT',
    path: '/device/:id/actuate',
    summary: 'Send a configuration message to a device',
    description:
      'Checked in this order: the device (404), the body (400), the labels (403: not `actuator` attributes). The JSON of `attrs` is ' +
      'published with QoS 1, not retained, to `<tenant>:<id>/config` and `/<tenant>/<id>/config`; 200 once the broker accepted it.',
    tag: 'actuation',
    params: { id: deviceIdParam },
    body: { read: 'json-deferred', schema: actuationBody },
    responses: {
      200: { description: 'Sent. The key has a leading space, as in the reference.', schema: 'ActuationSent' },
      400: {
        description: 'Not a JSON object with an object `attrs`; a value nested too deeply or a number beyond a double.',
        errors: ['actuationBodyNotObject', 'actuationValueTooDeep', 'actuationValueBeyondDouble', 'payloadNotJson'],
      },
      403: { description: 'Some labels are not actuator attributes of the device.', errors: ['notConfigurable'] },
      404: { description: 'No such device.', errors: ['noSuchDevice'] },
      503: { description: 'The broker did not accept the message within ACTUATION_TIMEOUT_MS.', errors: ['brokerUnavailable'] },
    },
    exampleParams: { id: DEV },
    examples: [
      {
        name: 'sent',
        summary: 'Switch the led on',
        body: { attrs: { led: true }, topic: '/admin/a1b2c3/config' },
        status: 200,
        response: { ' status': 'configuration sent to device' },
      },
      {
        name: 'notConfigurable',
        summary: 'temperature is not an actuator',
        body: { attrs: { temperature: 20 } },
        status: 403,
        response: err('notConfigurable', ['temperature']),
      },
      { name: 'badBody', summary: 'attrs not an object', body: { attrs: 5 }, status: 400, response: err('actuationBodyNotObject') },
      {
        name: 'unknown',
        summary: 'No such device',
        params: { id: 'ffffff' },
        body: { attrs: { led: true } },
        status: 404,
        response: err('noSuchDevice', 'ffffff'),
      },
    ],
    async handler(req, { actuation }) {
      await actuation.actuate(req.tenant, req.params.id!, req.body, req.bodyError);
      return { status: 200, body: ACTUATION_SENT };
    },
  },
];
