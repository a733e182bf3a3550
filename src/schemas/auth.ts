import type { NamedSchema } from './index.js';

export const authSchemas: NamedSchema[] = [
  {
    $id: 'auth.login',
    type: 'object',
    properties: {
      username: { type: 'string', minLength: 1 },
      passwd: { type: 'string', minLength: 1 },
    },
  },
  {
    $id: 'auth.createUser',
    type: 'object',
    required: ['username', 'passwd', 'service', 'profile'],
    properties: {
      username: { type: 'string', minLength: 1, maxLength: 128, pattern: '^[A-Za-z0-9_.@-]+$', 'x-message': 'Usernames may contain letters, numbers and .@_-' },
      passwd: { type: 'string', minLength: 1, maxLength: 1024 },
      service: { type: 'string', minLength: 1, maxLength: 128, pattern: '^[A-Za-z0-9_-]+$', 'x-message': 'Tenants may contain letters, numbers or dashes(-_)' },
      profile: { type: 'string', minLength: 1, maxLength: 64 },
    },
  },
];
