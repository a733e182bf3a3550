// The shipped Mosquitto kept in step with the registry's credentials (MQTT_DYNAMIC_SECURITY,
// docs/operations.md §2). Debian's Mosquitto has no HTTP authentication, but it has the
// dynamic-security plugin, driven by JSON commands on `$CONTROL/dynamic-security/v1`:
//   - a credential created: the device's client `<tenant>:<device_id>` is created (or its
//     password set) with the new secret, before the creation commits; its role grants the
//     legacy topics `/<tenant>/<device_id>/attrs|config` (the ACL file's `%u` patterns grant
//     the default ones) and denies shared subscriptions (`$share/#`);
//   - the credential the broker holds deleted (or expired), or the device removed: the client
//     and its role are deleted; Mosquitto then closes the device's connections itself.
//   - at start: clients of devices the registry no longer has (or whose credentials are gone)
//     are removed, devices with credentials the broker lacks are reported, and device roles of
//     earlier versions get the deny of `$share/#`.
// The plugin holds one password per client: the broker knows a device's newest credential only
// (rotation on Mosquitto: docs/operations.md §2). Setting a password makes Mosquitto close the
// device's connections, so none outlives the credential it logged in with.
import crypto from 'node:crypto';
import mqtt from 'mqtt';
import type pg from 'pg';
import { inTransaction } from '../db/pool.js';
import type { Logger } from '../log.js';
import * as repo from '../registry/credentials/repo.js';
import type { BrokerAccounts } from '../registry/credentials/service.js';
import type { RegistryEvent } from '../registry/events.js';
import { deviceName, parseDeviceName } from '../topics.js';
import { brokerLogin } from './broker-url.js';

const COMMANDS = '$CONTROL/dynamic-security/v1';
const RESPONSES = `${COMMANDS}/response`;
const CONNECT_MS = 10_000;
/** The longest pause between two sweeps of expired credentials (one also runs when the next one the broker holds expires). */
const SWEEP_MS = 60_000;
/**
 * The shortest pause between the starts of two sweeps: credentials expiring within a second of
 * each other share one (the login that an expired credential still gets at the broker is that
 * much late at most); and a margin past an expiry, so that the sweep's query sees it expired.
 */
const SWEEP_GAP_MS = 1000;
const SWEEP_MARGIN_MS = 20;
/** Devices per command message when many are removed at once (two commands each). */
const REMOVAL_BATCH = 50;
/**
 * How long a batch of the start-up reconciliation (or of a removed device's accounts, which no API answer waits for) may wait for the broker's answer. Mosquitto
 * saves its whole dynamic-security file after every command, so a command costs it time in
 * proportion to its accounts (~60 ms each with 15,000): a batch of 100 removals outlasts
 * ACTUATION_TIMEOUT_MS, which bounds API answers, not this.
 */
const RECONCILE_BATCH_MS = 120_000;
/**
 * How long the start waits for the broker's lists of clients and roles (no file is saved for
 * them). A broker without the plugin takes the commands and never answers: the start says so
 * after this, not after RECONCILE_BATCH_MS.
 */
const LIST_MS = 20_000;
const ROLE_PREFIX = 'device:';
/**
 * A name the registry can give a device: a tenant as users are made with (letters, digits, `-`,
 * `_`: src/auth/routes.ts) and a device id (2 to 6 hex digits: src/schemas/devices.ts). Only
 * such accounts (and their roles) are the service's to remove; any other, a ':' in it or not
 * (`ops:reader`), is the operator's.
 */
const DEVICE_ACCOUNT = /^[A-Za-z0-9_-]+:[0-9a-fA-F]{2,6}$/;

interface Answer {
  command: string;
  error?: string;
  /** Roles as names, or (`verbose`) with their ACLs. */
  data?: { clients?: string[]; roles?: Array<string | { rolename: string; acls?: RoleAcl[] }> };
}

export interface DynamicSecurityOptions {
  /** The broker, with the service's account (MQTT_URL); its ACL grants `$CONTROL/dynamic-security/#`. */
  url: string;
  clientId: string;
  /** How long a command may wait for the broker's answer. */
  timeoutMs: number;
  pool: pg.Pool;
  log: Logger;
}

/** What reconciliation found: clients removed, devices whose credentials the broker lacks (`<tenant>:<id>`). */
export interface Reconciled {
  removed: string[];
  missing: string[];
}

const roleOf = (username: string) => ROLE_PREFIX + username;

/**
 * No shared subscription for a device. Mosquitto 2 grants every subscription the ACL file does
 * not forbid and checks only delivery, and a shared subscription's message given to a member
 * whose delivery is denied is lost to the group: a device in the service's share group
 * (`$share/<group>/+/attrs`) took a share of every tenant's messages (found by an audit).
 */
const NO_SHARED = { acltype: 'subscribePattern', topic: '$share/#', allow: false } as const;

/** A device role's ACLs: its legacy topics (its default topics come from the ACL file's `%u` patterns), and no shared subscription. */
function deviceAcls(tenant: string, deviceId: string): object[] {
  const attrs = `/${tenant}/${deviceId}/attrs`;
  const config = `/${tenant}/${deviceId}/config`;
  return [
    { acltype: 'publishClientSend', topic: attrs, allow: true },
    { acltype: 'subscribeLiteral', topic: config, allow: true },
    { acltype: 'publishClientReceive', topic: config, allow: true },
    NO_SHARED,
  ];
}

interface RoleAcl {
  acltype?: string;
  topic?: string;
  allow?: boolean;
}
const deniesShared = (acls: RoleAcl[] | undefined) =>
  (acls ?? []).some((acl) => acl.acltype === NO_SHARED.acltype && acl.topic === NO_SHARED.topic && acl.allow === false);

const notFound = (a: Answer | undefined) => a?.error !== undefined && /not found/i.test(a.error);
const exists = (a: Answer | undefined) => a?.error !== undefined && /already exists/i.test(a.error);

export class DynamicSecurity implements BrokerAccounts {
  private readonly waiting = new Map<string, (a: Answer) => void>();
  private readonly prefix = crypto.randomBytes(6).toString('hex');
  private sequence = 0;
  private sweepTimer: NodeJS.Timeout | undefined;
  /** When the pending sweep runs (Date.now() time), and when the last one started. */
  private sweepAt = Infinity;
  private lastSweep = 0;
  private sweeping = false;
  /** A sweep was due while one ran: another follows it. */
  private sweepAgain = false;
  private closed = false;

  private constructor(
    private readonly client: mqtt.MqttClient,
    private readonly opts: DynamicSecurityOptions,
  ) {
    client.on('message', (topic, payload) => {
      if (topic === RESPONSES) this.answered(payload);
    });
  }

  /**
   * Connects, reconciles the broker with the registry, and sweeps expired credentials when the
   * next one the broker holds expires, and at least every minute.
   */
  static async start(opts: DynamicSecurityOptions): Promise<DynamicSecurity> {
    const { url: address, ...credentials } = brokerLogin(opts.url);
    const client = mqtt.connect(address, {
      ...credentials,
      clientId: opts.clientId,
      clean: true,
      reconnectPeriod: 1000,
      connectTimeout: 5000,
      protocolVersion: 5,
    });
    client.on('error', (err) => opts.log.debug('dynamic-security connection error', { error: err.message }));
    try {
      await new Promise<void>((resolve, reject) => {
        const timer = setTimeout(
          () => reject(new Error(`could not connect to the broker ${new URL(opts.url).host} to manage device accounts`)),
          CONNECT_MS,
        );
        client.once('connect', () => {
          clearTimeout(timer);
          resolve();
        });
      });
      // A clean session: subscribe again after each reconnection.
      const subscribe = () => client.subscribeAsync(RESPONSES, { qos: 1 });
      const granted = await subscribe();
      if (granted.some((g) => g.qos > 2))
        throw new Error(`the broker refused ${RESPONSES}: its ACL must grant the service account $CONTROL/dynamic-security/#`);
      client.on('connect', () => void subscribe().catch(() => undefined));
    } catch (err) {
      client.end(true);
      throw err;
    }
    const accounts = new DynamicSecurity(client, opts);
    const found = await accounts.reconcile();
    opts.log.info('device accounts of the broker reconciled (dynamic-security)', {
      removed: found.removed.length,
      missing: found.missing.length,
    });
    await accounts.scheduleSweep();
    return accounts;
  }

  async secretAdded(tenant: string, deviceId: string, secret: string, requestId?: string, expiresMs?: number): Promise<void> {
    await this.logged('create the account of', { tenant, deviceId, requestId }, () => this.setSecret(tenant, deviceId, secret));
    // Mosquitto knows no expiry: the account goes when the credential expires (before, found by
    // an audit, at the minute's sweep: an expired credential logged in for up to a minute).
    if (expiresMs !== undefined) this.sweepBy(expiresMs + SWEEP_MARGIN_MS);
  }

  async accountRemoved(tenant: string, deviceId: string, requestId?: string): Promise<void> {
    await this.logged('remove the account of', { tenant, deviceId, requestId }, () => this.removeAccount(tenant, deviceId));
  }

  /** A change the broker did not make, logged with the id of the request that asked for it (docs/operations.md §8). */
  private async logged(
    what: string,
    change: { tenant: string; deviceId: string; requestId: string | undefined },
    step: () => Promise<void>,
  ): Promise<void> {
    try {
      await step();
    } catch (err) {
      const { tenant, deviceId, requestId } = change;
      this.opts.log.warn(`the broker did not ${what} a device`, {
        tenant,
        device: deviceId,
        ...(requestId === undefined ? {} : { requestId }),
        error: (err as Error).message,
      });
      throw err;
    }
  }

  private async setSecret(tenant: string, deviceId: string, secret: string): Promise<void> {
    const username = deviceName(tenant, deviceId);
    const [role, client] = await this.send([
      { command: 'createRole', rolename: roleOf(username), acls: deviceAcls(tenant, deviceId) },
      { command: 'createClient', username, password: secret, roles: [{ rolename: roleOf(username) }] },
    ]);
    this.check(role, exists);
    if (!exists(client)) return this.check(client);
    // An existing client: its password and role set at once (Mosquitto closes its connections).
    const [modified] = await this.send([{ command: 'modifyClient', username, password: secret, roles: [{ rolename: roleOf(username) }] }]);
    this.check(modified);
  }

  private async removeAccount(tenant: string, deviceId: string): Promise<void> {
    const answers = await this.send(removal(deviceName(tenant, deviceId)));
    for (const a of answers) this.check(a, notFound);
  }

  /** This instance's registry changes: a removed device's account goes (its rows are gone with it). */
  registryChanged(event: RegistryEvent): void {
    if (event.type !== 'devices.removed') return;
    void (async () => {
      for (let i = 0; i < event.deviceIds.length; i += REMOVAL_BATCH) {
        const usernames = event.deviceIds.slice(i, i + REMOVAL_BATCH).map((id) => deviceName(event.tenant, id));
        const answers = await this.send(usernames.flatMap(removal), Math.max(this.opts.timeoutMs, RECONCILE_BATCH_MS));
        for (const a of answers) this.check(a, notFound);
      }
    })().catch((err: Error) =>
      this.opts.log.warn('the broker accounts of removed devices were not all deleted; the next start removes them', {
        tenant: event.tenant,
        devices: event.deviceIds.length,
        error: err.message,
      }),
    );
  }

  /**
   * The broker's device clients against the registry: a client of a device without an
   * unexpired credential held by the broker is deleted; a device with credentials but no client
   * is reported (its secrets are not kept, so only a new credential gives it an account again).
   */
  async reconcile(): Promise<Reconciled> {
    await this.sweepExpired();
    const [clients, roles] = await this.send(
      [
        { command: 'listClients', verbose: false, count: -1 },
        { command: 'listRoles', verbose: true, count: -1 },
      ],
      Math.max(this.opts.timeoutMs, LIST_MS),
    ).catch((err: Error) => {
      // No answer at all (a publish refused by the broker is another error).
      if (!/in time/.test(err.message)) throw err;
      throw new Error(
        `${err.message} (listClients, ${Math.max(this.opts.timeoutMs, LIST_MS) / 1000} s): MQTT_DYNAMIC_SECURITY needs Mosquitto's dynamic-security plugin loaded in the broker of MQTT_URL (mosquitto.conf: plugin .../mosquitto_dynamic_security.so)`,
      );
    });
    this.check(clients);
    this.check(roles);
    const present = new Set((clients!.data?.clients ?? []).filter((u) => parseDeviceName(u) !== undefined));
    const wanted = await repo.brokerAccounts(this.opts.pool);
    const held = new Set(wanted.filter((w) => w.in_broker).map((w) => deviceName(w.tenant, w.device_id)));
    // An account of an existing device that the service did not make (no role device:<name>)
    // is the operator's: the versions before credentials had each device's account made by hand
    // (mosquitto_ctrl), and removing those at the first start of this version locked every
    // device out. Accounts of no device, and the service's own without a credential, go.
    const roleList = (roles!.data?.roles ?? []).map((r) => (typeof r === 'string' ? { rolename: r, acls: undefined } : r));
    const roleNames = roleList.map((r) => r.rolename);
    const serviceRoles = new Set(roleNames.filter((r) => r.startsWith(ROLE_PREFIX)));
    const candidates = [...present].filter((u) => DEVICE_ACCOUNT.test(u) && !held.has(u));
    const handMade = candidates.filter((u) => !serviceRoles.has(roleOf(u))).map((u) => ({ u, d: parseDeviceName(u)! }));
    const existing = await repo.existingDevices(
      this.opts.pool,
      handMade.map(({ d }) => ({ tenant: d.tenant, deviceId: d.id })),
    );
    const kept = handMade.filter(({ d }) => existing.has(`${d.tenant}\n${d.id}`)).map(({ u }) => u);
    const removed = candidates.filter((u) => !kept.includes(u));
    if (kept.length > 0)
      this.opts.log.warn('broker accounts of devices without credentials, not made by the service, left alone', {
        accounts: kept.length,
        first: kept.slice(0, 20),
      });
    const orphanRoles = roleNames.filter((r) => {
      const username = r.slice(ROLE_PREFIX.length);
      return r.startsWith(ROLE_PREFIX) && DEVICE_ACCOUNT.test(username) && !held.has(username) && !removed.includes(username);
    });
    // The service's device roles that stay, made by a version before the rule against shared
    // subscriptions: they get it (once; a role made since has it).
    const unshared = roleList
      .filter(({ rolename, acls }) => {
        const username = rolename.slice(ROLE_PREFIX.length);
        return (
          rolename.startsWith(ROLE_PREFIX) &&
          DEVICE_ACCOUNT.test(username) &&
          !orphanRoles.includes(rolename) &&
          !removed.includes(username) &&
          !deniesShared(acls)
        );
      })
      .map(({ rolename }) => ({ command: 'addRoleACL', rolename, ...NO_SHARED }));
    const commands = [...removed.flatMap(removal), ...orphanRoles.map((rolename) => ({ command: 'deleteRole', rolename }))];
    await this.sendInBatches(commands);
    // After the start, not before it: Mosquitto saves its whole file after each command, so a
    // fleet's roles (each device of an earlier version) would hold the start for a long time.
    if (unshared.length > 0) void this.denyShared(unshared);
    if (removed.length > 0)
      this.opts.log.info('removed broker accounts of devices without credentials', {
        accounts: removed.length,
        first: removed.slice(0, 20),
      });
    const lost = wanted.filter((w) => w.in_broker && !present.has(deviceName(w.tenant, w.device_id)));
    await repo.clearInBroker(
      this.opts.pool,
      lost.map((w) => ({ tenant: w.tenant, deviceId: w.device_id })),
    );
    const missing = wanted
      .filter((w) => !w.in_broker || !present.has(deviceName(w.tenant, w.device_id)))
      .map((w) => deviceName(w.tenant, w.device_id));
    if (missing.length > 0) {
      this.opts.log.warn(
        'the broker lacks the accounts of devices with credentials: create a new credential for each (POST /device/{id}/credentials)',
        {
          devices: missing.length,
          first: missing.slice(0, 20),
        },
      );
    }
    return { removed, missing };
  }

  /** Commands of the reconciliation, in batches; each answer must be done, not found or already there. */
  private async sendInBatches(commands: object[]): Promise<void> {
    for (let i = 0; i < commands.length; i += 2 * REMOVAL_BATCH) {
      const batch = commands.slice(i, i + 2 * REMOVAL_BATCH);
      for (const a of await this.send(batch, Math.max(this.opts.timeoutMs, RECONCILE_BATCH_MS)))
        this.check(a, (x) => notFound(x) || exists(x));
    }
  }

  /** Device roles of earlier versions get the deny of shared subscriptions; never throws (the next start tries again). */
  private async denyShared(commands: object[]): Promise<void> {
    this.opts.log.info('denying shared subscriptions to device roles of the broker made by an earlier version', { roles: commands.length });
    try {
      await this.sendInBatches(commands);
      this.opts.log.info('device roles of the broker denied shared subscriptions', { roles: commands.length });
    } catch (err) {
      this.opts.log.warn('device roles of the broker not all denied shared subscriptions; the next start goes on', {
        error: (err as Error).message,
      });
    }
  }

  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.sweepTimer);
    await new Promise<void>((resolve) => this.client.end(false, {}, () => resolve()));
  }

  /** The next sweep runs by `at` (Date.now() time) or within SWEEP_MS, not sooner than SWEEP_GAP_MS after the last one started. */
  private sweepBy(at: number): void {
    if (this.closed) return;
    // Within SWEEP_MS in any case (a far expiry is swept for by the sweeps before it).
    const when = Math.max(Math.min(at, Date.now() + SWEEP_MS), this.lastSweep + SWEEP_GAP_MS);
    if (when >= this.sweepAt) return;
    clearTimeout(this.sweepTimer);
    this.sweepAt = when;
    this.sweepTimer = setTimeout(() => void this.sweep(), Math.max(0, when - Date.now()));
    this.sweepTimer.unref();
  }

  /** A sweep, then the next one: when the next credential the broker holds expires (by the database's clock), within SWEEP_MS. */
  private async sweep(): Promise<void> {
    this.sweepAt = Infinity;
    if (this.closed) return;
    if (this.sweeping) {
      this.sweepAgain = true;
      return;
    }
    this.sweeping = true;
    this.lastSweep = Date.now();
    try {
      await this.sweepExpired();
    } catch (err) {
      this.opts.log.warn('expired device accounts not removed', { error: (err as Error).message });
    } finally {
      this.sweeping = false;
    }
    if (this.sweepAgain) {
      this.sweepAgain = false;
      this.sweepBy(Date.now());
    }
    await this.scheduleSweep();
  }

  private async scheduleSweep(): Promise<void> {
    const next = await repo.nextExpiryInBroker(this.opts.pool).catch(() => undefined);
    this.sweepBy(Date.now() + Math.min(SWEEP_MS, next === undefined ? SWEEP_MS : next + SWEEP_MARGIN_MS));
  }

  /** Credentials the broker holds that have expired: their accounts go. */
  private async sweepExpired(): Promise<void> {
    for (const d of await repo.expiredInBroker(this.opts.pool)) {
      // Decided again under the device's lock: a credential created meanwhile (a rotation at the
      // expiry) has given the account its secret, which must stay (before, found by an audit,
      // the sweep removed it and the new credential could not log in).
      const removed = await inTransaction(this.opts.pool, async (c) => {
        if (!(await repo.lockIfExpiredInBroker(c, d.tenant, d.device_id))) return false;
        await this.accountRemoved(d.tenant, d.device_id);
        await repo.clearInBroker(c, [{ tenant: d.tenant, deviceId: d.device_id }]);
        return true;
      });
      if (removed)
        this.opts.log.info('removed the broker account of a device whose credential expired', { tenant: d.tenant, device: d.device_id });
    }
  }

  /** Sends commands in one message; resolves with their answers, in order. */
  private send(commands: object[], timeoutMs = this.opts.timeoutMs): Promise<Array<Answer | undefined>> {
    if (commands.length === 0) return Promise.resolve([]);
    if (!this.client.connected) return Promise.reject(new Error('not connected to the broker'));
    const batch = `${this.prefix}:${++this.sequence}`;
    const ids = commands.map((_, i) => `${batch}:${i}`);
    return new Promise((resolve, reject) => {
      const answers = new Array<Answer | undefined>(commands.length);
      let left = commands.length;
      const timer = setTimeout(() => {
        for (const id of ids) this.waiting.delete(id);
        reject(new Error('the broker did not answer the dynamic-security commands in time'));
      }, timeoutMs);
      ids.forEach((id, i) =>
        this.waiting.set(id, (a) => {
          this.waiting.delete(id);
          answers[i] = a;
          if (--left === 0) {
            clearTimeout(timer);
            resolve(answers);
          }
        }),
      );
      // Secrets travel in these commands only, to the broker; they are never logged.
      const payload = JSON.stringify({ commands: commands.map((c, i) => ({ ...c, correlationData: ids[i] })) });
      this.client.publish(COMMANDS, payload, { qos: 1 }, (err) => {
        if (!err) return;
        clearTimeout(timer);
        for (const id of ids) this.waiting.delete(id);
        reject(err);
      });
    });
  }

  private answered(payload: Buffer): void {
    let parsed: { responses?: Array<Answer & { correlationData?: string }> };
    try {
      parsed = JSON.parse(payload.toString('utf8')) as typeof parsed;
    } catch {
      return;
    }
    for (const r of parsed.responses ?? []) if (r.correlationData) this.waiting.get(r.correlationData)?.(r);
  }

  /** Throws the broker's error, unless `fine` says it changes nothing ("not found" of a removal, "already exists"). */
  private check(a: Answer | undefined, fine: (a: Answer | undefined) => boolean = () => false): void {
    if (!a) throw new Error('the broker did not answer a dynamic-security command');
    if (a.error !== undefined && !fine(a)) throw new Error(`the broker refused ${a.command}: ${a.error}`);
  }
}

/** The commands that remove a device's client and its role. */
function removal(username: string): object[] {
  return [
    { command: 'deleteClient', username },
    { command: 'deleteRole', rolename: roleOf(username) },
  ];
}
