// PUT /device/{id}/actuate (decisions.md "Actuation"), checked in the contract's order:
// unknown device (404), body not an object with an object `attrs` (400: the `actuationBody`
// schema, src/schemas/actuation.ts), labels that are not actuators (403), then the message goes
// to the device's config topics in both layouts (QoS 1, not retained). 200 only once the broker
// accepted both; 503 if it is unavailable.
import type pg from 'pg';
import { type ApiError, BrokerUnavailable, errors } from '../../errors.js';
import { configTopics } from '../../topics.js';
import { actuationBody } from '../../schemas/actuation.js';
import { validate } from '../../schemas/validator.js';
import { actuatorLabels } from './repo.js';

export interface ConfigPublisher {
  publish(topics: string[], payload: string): Promise<void>;
}

/** A body the `actuationBody` schema accepted; other keys (`topic`) are ignored. */
interface ActuationBody {
  attrs: Record<string, unknown>;
}

export const ACTUATION_SENT = { ' status': 'configuration sent to device' } as const;

export class ActuationService {
  constructor(
    private readonly pool: pg.Pool,
    private readonly publisher: ConfigPublisher,
  ) {}

  async actuate(tenant: string, id: string, body: unknown, bodyError: ApiError | undefined): Promise<void> {
    const actuators = await actuatorLabels(this.pool, tenant, id);
    if (!actuators) throw errors.noSuchDevice(id);
    if (bodyError) throw bodyError;
    const { attrs } = validate<ActuationBody>(actuationBody, body);
    const refused = Object.keys(attrs).filter((label) => !actuators.has(label));
    if (refused.length > 0) throw errors.notConfigurable(refused);
    let message: string;
    let beyondDouble = false;
    try {
      // A number beyond a double (1e400) parses as Infinity, which JSON.stringify writes as null:
      // the device would get null for the value asked for. Such a body is refused instead.
      message = JSON.stringify(attrs, (_key, value: unknown) => {
        if (typeof value === 'number' && !Number.isFinite(value)) beyondDouble = true;
        return value;
      });
    } catch {
      // Parsed, but too deep for JSON.stringify's recursion (thousands of levels): nothing is sent.
      throw errors.actuationValueTooDeep();
    }
    if (beyondDouble) throw errors.actuationValueBeyondDouble();
    try {
      await this.publisher.publish(configTopics(tenant, id), message);
    } catch (err) {
      if (err instanceof BrokerUnavailable) throw errors.brokerUnavailable();
      throw err;
    }
  }
}
