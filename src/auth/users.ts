// Users in PostgreSQL. The password hash never leaves this module.
import type pg from 'pg';
import { registryTimeSql } from '../time.js';
import { hashPassword } from './passwords.js';

/** The tenant of the first admin: its admins create users of any tenant, other admins of their own only. */
export const PLATFORM_TENANT = 'admin';

export interface User {
  id: number;
  tenant: string;
  username: string;
  profile: string;
  created: Date;
}

export interface StoredUser extends User {
  passwordHash: string;
}

const COLUMNS = 'id, tenant, username, profile, created, password_hash AS "passwordHash"';

export async function findUser(pool: pg.Pool, username: string): Promise<StoredUser | undefined> {
  if (username.includes('\0')) return undefined; // no stored name holds NUL (PostgreSQL text cannot)
  const { rows } = await pool.query<StoredUser>(`SELECT ${COLUMNS} FROM users WHERE username = $1`, [username]);
  return rows[0];
}

/** A user as created: `created` in the registry's text form, to the microsecond (a Date keeps milliseconds). */
export type CreatedUser = Omit<User, 'created'> & { created: string };

/** Creates a user; undefined when the username is taken. */
export async function createUser(
  pool: pg.Pool,
  input: { username: string; password: string; tenant: string; profile: string },
): Promise<CreatedUser | undefined> {
  const hash = await hashPassword(input.password);
  const { rows } = await pool.query<CreatedUser>(
    `INSERT INTO users (tenant, username, password_hash, profile) VALUES ($1, $2, $3, $4)
     ON CONFLICT (username) DO NOTHING RETURNING id, tenant, username, profile, ${registryTimeSql('created')} AS created`,
    [input.tenant, input.username, hash, input.profile],
  );
  return rows[0];
}

export async function countUsers(pool: pg.Pool): Promise<number> {
  const { rows } = await pool.query<{ n: number }>('SELECT count(*)::int AS n FROM users');
  return rows[0]!.n;
}
