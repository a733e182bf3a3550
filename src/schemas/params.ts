// Path parameters named by several routes (their `params`); the document shows each with its
// description.

export const templateIdParam = { type: 'integer', minimum: 1, description: 'A template id. Anything else names no template (404).' };
export const deviceIdParam = { type: 'string', description: 'A device id.' };
