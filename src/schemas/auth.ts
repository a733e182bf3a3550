import type { NamedSchema } from './index.js';
import { noNul } from './templates.js';

export const authSchemas: NamedSchema[] = [
  {
    // decisions.md "Authentication": not a JSON object -> `invalid mimetype`, then each field.
    $id: 'auth.login',
    type: 'object',
    required: ['username', 'passwd'],
    properties: {
      username: { type: 'string', minLength: 1, 'x-error': 'authMissingUsername' },
      passwd: { type: 'string', minLength: 1, 'x-error': 'authMissingPassword' },
    },
    'x-error': { type: 'authInvalidMimetype' },
    'x-error-order': ['authInvalidMimetype', 'authMissingUsername', 'authMissingPassword'],
  },
  {
    $id: 'auth.createUser',
    type: 'object',
    required: ['username', 'passwd', 'service', 'profile'],
    properties: {
      // Length and pattern apart, so that each failure gets its own text.
      username: {
        type: 'string',
        minLength: 1,
        maxLength: 128,
        allOf: [{ pattern: '^[A-Za-z0-9_.@-]*$', 'x-message': 'Usernames may contain letters, numbers and .@_-' }],
      },
      passwd: { type: 'string', minLength: 1, maxLength: 1024, allOf: [noNul] },
      service: {
        type: 'string',
        minLength: 1,
        maxLength: 128,
        allOf: [{ pattern: '^[A-Za-z0-9_-]*$', 'x-message': 'Tenants may contain letters, numbers or dashes(-_)' }],
        description: 'The tenant.',
      },
      profile: { type: 'string', minLength: 1, maxLength: 64, allOf: [noNul], description: '`admin` may create users; any other text is an ordinary user.' },
    },
  },
];
