// Every error the API answers with, in one place: its HTTP status and its exact body
// (interface.md §7, decisions.md). Code throws `errors.x(...)`; the HTTP layer writes it.

export class ApiError extends Error {
  constructor(
    readonly httpStatus: number,
    readonly body: unknown,
    readonly headers: Record<string, string> = {},
  ) {
    super(typeof body === 'object' && body && 'message' in body ? String(body.message) : `HTTP ${httpStatus}`);
    this.name = 'ApiError';
  }
}

/** `{message, status}` with the body status equal to the HTTP status. */
const plain = (status: number, message: string) => new ApiError(status, { message, status });

/** Field errors as the contract shows them: `{"<field>": ["<text>"]}`. */
export type FieldErrors = Record<string, unknown>;

export const errors = {
  // Common (decisions.md "Common")
  invalidEndpoint: () => plain(404, 'Invalid endpoint requested'),
  methodNotAllowed: (allowed: string[]) =>
    new ApiError(405, { message: `Method not allowed; use ${allowed.join(', ')}`, status: 405 }, { Allow: allowed.join(', ') }),
  payloadNotJson: () => plain(400, 'Payload must be valid JSON, and Content-Type set accordingly'),
  bodyTooLarge: (limit: number) => plain(413, `Payload too large: the limit is ${limit} bytes`),
  internal: () => plain(500, 'Internal Error'),
  validation: (fieldErrors: FieldErrors, message = 'failed to parse input') => new ApiError(400, { message, errors: fieldErrors }),
  badQuery: (message: string) => plain(400, message),

  // Authentication (decisions.md "Authentication")
  noToken: () => plain(401, 'No authorization token has been supplied'),
  invalidToken: () => plain(401, 'Invalid authentication token'),
  authInvalidMimetype: () => plain(400, 'invalid mimetype'),
  authMissingUsername: () => plain(400, 'missing username'),
  authMissingPassword: () => plain(400, 'missing password'),
  authUnknownUser: () => plain(401, 'AuthenticationError'),
  authWrongPassword: () => plain(403, 'AuthorizationError'),
  forbidden: (message = 'Forbidden: this action needs the admin profile') => plain(403, message),
  forbiddenOtherTenant: (tenant: string) =>
    plain(
      403,
      `Forbidden: an admin of tenant ${tenant} creates users of tenant ${tenant} only (other tenants' users are created by an admin of tenant admin)`,
    ),
  userExists: (username: string) => plain(409, `User ${username} already exists`),

  // Pagination (decisions.md "Pagination")
  pagingNotIntegers: () => plain(400, 'page_size and page_num must be integers'),
  pageNumTooSmall: () => plain(400, 'Page numbers must be greater than 1'),
  pageSizeTooSmall: () => plain(400, 'At least one entry per page is mandatory'),
  pageSizeTooLarge: (max: number) => plain(400, `page_size must be at most ${max}`),
  attrFilterWithoutValue: (filter: string) => plain(400, `attr filter "${filter}" must have the form <label>=<value>`),

  // Templates
  noSuchTemplate: (id: string | number) => plain(404, `No such template: ${id}`),
  templatesInUse: () => plain(404, 'Templates cannot be removed as they are being used by devices'),

  // Devices
  noSuchDevice: (id: string) => plain(404, `No such device: ${id}`),
  countNotInteger: () => plain(400, 'If provided, count must be integer'),
  countTooLarge: (max: number) => plain(400, `count must be at most ${max}`),
  verboseWithCount: () => plain(400, 'Verbose can only be used for single device creation'),
  repeatedAttributes: () => new ApiError(400, { message: ['a device can not have repeated attributes'], status: 400 }),
  missingOverrideLabel: () => new ApiError(400, { message: ['missing label attribute'], status: 400 }),
  unknownTemplateInAttrList: (templateId: string | number) => plain(400, `Unknown template ${templateId} in attr list`),
  // The contract answers these two with HTTP 404 and a body status of 400.
  unknownOverrideAttr: (attrId: string | number) =>
    new ApiError(404, { message: `Unknown attribute ${attrId} in override list`, status: 400 }),
  unknownOverrideMetadata: (attrId: string | number) =>
    new ApiError(404, { message: `Unknown metadata attribute ${attrId} in override list`, status: 400 }),
  badDeviceId: () =>
    new ApiError(400, { message: ['Device ID must be 2-6 characters and must be hexadecimal (0-9,a-f,A-F).'], status: 400 }),
  pskOverride: (label: string) => plain(400, `The key of psk attribute ${label} is set by gen_psk or a key copy, not by the override list`),
  pskMetadataOverride: (label: string) =>
    plain(400, `The value of psk metadata attribute ${label} is a key: it cannot be set by the override list`),
  deviceIdInUse: (id: string) => plain(400, `Device ID ${id} is already in use`),
  deviceIdWithCount: () => plain(400, 'A device ID can only be given for single device creation'),
  deviceIdGenerationFailed: () => plain(500, 'Failed to generate unique device_id'),

  // Actuation: the body `status` is a text here.
  notConfigurable: (labels: string[]) => new ApiError(403, { status: 'some of the attributes are not configurable', attrs: labels }),
  brokerUnavailable: () => plain(503, 'The message broker is not available; the configuration was not sent'),
  actuationBodyNotObject: () => plain(400, 'The body must be a JSON object with an "attrs" object (attribute label to new value)'),
  actuationValueTooDeep: () => plain(400, 'An attribute value is nested too deeply to be sent'),
  actuationValueBeyondDouble: () =>
    plain(400, 'An attribute value is a number beyond the range of a double (such as 1e400) and cannot be sent'),

  // Pre-shared keys
  missingKeyLength: () => plain(400, 'Missing key_length parameter'),
  badKeyLength: () => plain(400, 'key_length must be greater than 0 and lesser than 1024'),
  pskUnknownAttrs: () => plain(400, 'Not found some attributes, please check them'),
  pskNotPskAttr: () => plain(400, "Some attribute is not a 'psk' type_value"),
  copyMissingSource: () => plain(400, 'Missing mandatory parameter: from_dev_id or/and from_attr_label'),
  copyAttrNotFound: (label: string) => plain(404, `Not found attributes ${label}`),
  copyAttrNotPsk: (label: string) => plain(400, `Attribute ${label} is not a 'psk' type_value`),
  copyNoSourceKey: (label: string) => plain(400, `There is not a psk generated to ${label}`),

  // Device credentials
  credentialBadInput: (message: string) => plain(400, message),
  credentialLimit: (max: number) => plain(400, `A device holds at most ${max} credentials; delete one first`),
  credentialExpiresInPast: () => plain(400, 'expires_at must be in the future'),
  noSuchCredential: (id: string) => plain(404, `No such credential: ${id}`),
  brokerHookBadBody: (message: string) => plain(400, message),
  brokerAccountsUnavailable: () => plain(503, 'The message broker did not confirm the device account change; nothing was changed'),

  // History
  badHistoryQuery: (message: string) => plain(400, message),
  historyReadsBusy: () => plain(503, 'Too many aggregate history reads are waiting while ingest has the CPU; send the request again later'),

  // Health and operations
  unhealthy: () => plain(503, 'Database unavailable'),
  shuttingDown: () => plain(503, 'The service is shutting down; send the request again'),
  notAcceptable: (mediaType: string) => plain(406, `This resource is only available as ${mediaType}`),

  // Live stream
  notAStream: () => plain(400, 'GET /stream is a WebSocket (Upgrade) or Server-Sent Events (Accept: text/event-stream)'),
  streamSubprotocol: (subprotocol: string) =>
    plain(400, `A WebSocket that offers subprotocols must offer ${subprotocol} (beside bearer.<token>)`),
  /** A stream refused at shutdown (its text is shorter than `shuttingDown`'s, as it always was). */
  streamShuttingDown: () => plain(503, 'The service is shutting down'),
  tooManyStreams: (max: number) =>
    plain(
      429,
      `This tenant has ${max} live streams open on this instance, the most allowed (LIVE_MAX_CLIENTS_PER_TENANT); close one first`,
    ),
} as const;

/** The name of an error of the registry. */
export type ErrorKey = keyof typeof errors;

/**
 * The broker did not take a configuration message (down, or no acknowledgement in time). Thrown by
 * the broker link, answered as `errors.brokerUnavailable()` (503) by actuation.
 */
export class BrokerUnavailable extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'BrokerUnavailable';
  }
}
