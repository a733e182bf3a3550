// The status lines of the answers (uWebSockets.js sends the line it is given, reason phrase and all).
const STATUS_LINES: Record<number, string> = {
  101: '101 Switching Protocols',
  200: '200 OK',
  201: '201 Created',
  204: '204 No Content',
  400: '400 Bad Request',
  401: '401 Unauthorized',
  403: '403 Forbidden',
  404: '404 Not Found',
  405: '405 Method Not Allowed',
  406: '406 Not Acceptable',
  409: '409 Conflict',
  413: '413 Payload Too Large',
  429: '429 Too Many Requests',
  500: '500 Internal Server Error',
  503: '503 Service Unavailable',
};

/** `200 OK`; a status not listed goes as its number alone. */
export const statusLine = (status: number): string => STATUS_LINES[status] ?? String(status);
