// The token of an `Authorization: Bearer <token>` header (RFC 6750 §2.1).

/**
 * The token of `header`, or undefined when it is not `Bearer <token>` with nothing after the
 * token. The scheme is read in any case (RFC 9110 §11.1: `bearer`, `BEARER`) and may be followed
 * by several spaces (RFC 6750's `1*SP`); before (found by an audit), `bearer <token>` with a
 * valid token was 401 "Invalid authentication token".
 */
export function bearerTokenOf(header: string): string | undefined {
  return /^Bearer +(\S+)$/i.exec(header.trim())?.[1];
}
