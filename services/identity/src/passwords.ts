import { hash, verify } from '@node-rs/argon2';
import { randomBytes } from 'node:crypto';

/**
 * Password hashing: argon2id (the library's default algorithm) with its default
 * cost (19 MiB, 2 passes). verify() compares in constant time.
 */
export const hashPassword = (password: string): Promise<string> => hash(password);

/**
 * A hash of a password no one knows, verified against when there is no real
 * hash (unknown email, user without password), so such attempts cost the same
 * time as a wrong password and do not reveal which emails exist.
 */
let dummy: Promise<string> | undefined;
const dummyHash = () => (dummy ??= hash(randomBytes(32).toString('base64url')));

/** Computes the dummy hash at start-up, so the first unknown email is not slower than later ones. */
export const preparePasswordChecks = async (): Promise<void> => {
  await dummyHash();
};

/** True only when the stored hash exists and matches; always spends one verify. */
export async function checkPassword(stored: string | null | undefined, password: string): Promise<boolean> {
  const target = stored ?? (await dummyHash());
  let ok: boolean;
  try {
    ok = await verify(target, password);
  } catch {
    ok = false; // a malformed stored hash is a mismatch, not a crash
  }
  return ok && !!stored;
}
