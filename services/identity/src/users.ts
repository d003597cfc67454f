import { sql } from 'drizzle-orm';
import { DomainError, newId, type CallerContext, type Executor, type ServiceDeps } from '@lab/kit';
import type { identity } from '@lab/contracts';
import { findWithPassword, hashPassword } from './passwords.js';

type User = identity.User;

interface UserRow {
  id: string;
  email: string;
  name: string | null;
}

const toUser = (r: UserRow): User => ({ id: r.id, email: r.email, ...(r.name !== null ? { name: r.name } : {}) });

async function findUser(deps: ServiceDeps, userId: string, exec?: Executor): Promise<User | null> {
  const [row] = await deps.db.rows<UserRow>(sql`select id, email, name from identity.users where id = ${userId}`, exec);
  return row ? toUser(row) : null;
}

export async function getUser(deps: ServiceDeps, userId: string, exec?: Executor): Promise<User> {
  const user = await findUser(deps, userId, exec);
  if (!user) throw DomainError.notFound('user not found');
  return user;
}

export async function createUser(deps: ServiceDeps, caller: CallerContext, input: { email: string; name?: string; password?: string }): Promise<User> {
  const id = newId();
  // Hash before the transaction: argon2 takes tens of milliseconds.
  const passwordHash = input.password === undefined ? null : await hashPassword(input.password);
  return deps.outbox.write(caller, async (tx, emit) => {
    const inserted = await deps.db.rows<UserRow>(
      sql`insert into identity.users (id, email, name, password_hash)
          values (${id}, ${input.email}, ${input.name ?? null}, ${passwordHash})
          on conflict ((lower(email))) do nothing
          returning id, email, name`,
      tx,
    );
    if (!inserted[0]) throw DomainError.conflict('a user with this email exists', 'email_taken');
    const user = toUser(inserted[0]);
    emit.audit(null, { action: 'create', resource: 'user', record_id: id, after: { ...user, has_password: passwordHash !== null } });
    return user;
  });
}

/** The user of an email (case-insensitive) with its password hash, for sign-in. */
export async function findCredentials(deps: ServiceDeps, email: string): Promise<{ id: string; password_hash: string | null } | null> {
  const [row] = await deps.db.rows<{ id: string; password_hash: string | null }>(
    sql`select id, password_hash from identity.users where lower(email) = lower(${email.trim()})`,
  );
  return row ?? null;
}

/** Re-entered password check (signing). UNAUTHENTICATED invalid_password when wrong. */
export async function verifyUserPassword(deps: ServiceDeps, userId: string, password: string): Promise<void> {
  const found = await findWithPassword(async () => {
    const [row] = await deps.db.rows<{ password_hash: string | null }>(sql`select password_hash from identity.users where id = ${userId}`);
    return row;
  }, password);
  if (!found) {
    throw DomainError.unauthenticated('the password is not correct', 'invalid_password');
  }
}

/** The login form of the OAuth consent page: the user of a correct email and password, else invalid_grant. */
export async function checkCredentials(deps: ServiceDeps, email: string, password: string): Promise<User> {
  const cred = await findWithPassword(() => findCredentials(deps, email), password);
  if (!cred) throw new DomainError('invalid', 'invalid_grant', 'invalid email or password');
  return getUser(deps, cred.id);
}
