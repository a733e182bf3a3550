// MQTT_URL's user name and password, read one way for every connection of the service to the
// broker (ingest subscribers, actuation publisher, dynamic-security client, session drain).
// mqtt.js reads them from the URL itself by splitting the decoded `user:password` at its last
// ':', so a password holding ':' (written %3A) logged in as the wrong user: given here instead,
// decoded, beside the URL without them.

export interface BrokerLogin {
  /** MQTT_URL without its user name and password. */
  url: string;
  username?: string;
  password?: string;
}

/** The address and the login of a broker URL (checked by config: it parses and decodes). */
export function brokerLogin(brokerUrl: string): BrokerLogin {
  const u = new URL(brokerUrl);
  const username = u.username ? decodeURIComponent(u.username) : undefined;
  const password = u.password ? decodeURIComponent(u.password) : undefined;
  u.username = '';
  u.password = '';
  return { url: u.toString(), ...(username !== undefined ? { username } : {}), ...(password !== undefined ? { password } : {}) };
}
