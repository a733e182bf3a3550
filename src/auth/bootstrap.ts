import type pg from 'pg';
import { ConfigError, type Config } from '../config.js';
import type { Logger } from '../log.js';
import { PLATFORM_TENANT, countUsers, createUser } from './users.js';

/**
 * With no users at all, creates the first admin (username `admin`, tenant `admin`, profile
 * `admin`). Its password is ADMIN_PASSWORD; `admin` is the default only with the embedded
 * database, the zero-setup first run (its public API still listens on every interface, HOST
 * 0.0.0.0: README says to set ADMIN_PASSWORD on a machine others can reach).
 */
export async function ensureAdmin(pool: pg.Pool, config: Config, log: Logger): Promise<void> {
  if ((await countUsers(pool)) > 0) return;
  let password = config.adminPassword;
  if (password === undefined) {
    if (config.databaseUrl) {
      throw new ConfigError(
        'ADMIN_PASSWORD',
        "must be set when DATABASE_URL is set and the database has no users yet (it is the first admin's password)",
      );
    }
    password = 'admin';
  }
  const user = await createUser(pool, { username: 'admin', password, tenant: PLATFORM_TENANT, profile: 'admin' });
  if (user) log.info('created the first admin user', { username: 'admin', tenant: PLATFORM_TENANT });
}
