import { randomUUID } from 'node:crypto';
import { DomainError } from '@lab/kit';
import { countedSignIn, type RateLimiter } from '../src/rate-limit';

const RIGHT = 'the right password';

/** One attempt at `email` from `address`, checked as identity would: 'ok', 'wrong' or the refusal's code. */
async function attempt(limiter: RateLimiter, email: string, address: string, password: string): Promise<string> {
  let checked = false;
  const outcome = await countedSignIn(limiter, { email, address }, () => {
    checked = true;
    return password === RIGHT ? Promise.resolve('ok') : Promise.reject(DomainError.invalid('invalid email or password', undefined, 'invalid_grant'));
  }).then(
    (r) => r,
    (e: DomainError) => (e.code === 'invalid_grant' ? 'wrong' : e.code),
  );
  // a refusal is decided before the password is looked at
  expect(checked).toBe(outcome !== 'rate_limited');
  return outcome;
}

const tally = (xs: string[]) => xs.reduce<Record<string, number>>((t, x) => ({ ...t, [x]: (t[x] ?? 0) + 1 }), {});

/**
 * 80 wrong passwords at one account from 8 addresses in turn: the account's 60 a
 * minute are checked, the other 20 refused, and then the user's right password
 * passes from their own address and from a fresh one; the flooding addresses are
 * refused even the right password, a fresh guesser gets 3 tries. Asserted on the
 * limiter's store, in memory or in Redis.
 */
export async function expectFloodNotToLockOut(limiter: RateLimiter): Promise<void> {
  const email = `flooded-${randomUUID()}@example.test`;
  expect(await attempt(limiter, email, '198.51.100.1', RIGHT)).toBe('ok');
  const flood: string[] = [];
  for (let i = 0; i < 80; i++) flood.push(await attempt(limiter, email, `203.0.113.${i % 8}`, `guess ${i}`));

  expect(await attempt(limiter, email, '198.51.100.1', RIGHT)).toBe('ok');
  expect(await attempt(limiter, email, '198.51.100.2', RIGHT)).toBe('ok');
  // the right password before did not count: the flood got the account's 60 checks, no more
  expect(tally(flood)).toEqual({ wrong: 60, rate_limited: 20 });
  for (let a = 0; a < 8; a++) expect(await attempt(limiter, email, `203.0.113.${a}`, RIGHT)).toBe('rate_limited');
  const fresh: string[] = [];
  for (let i = 0; i < 4; i++) fresh.push(await attempt(limiter, email, '198.51.100.3', `another ${i}`));
  expect(fresh).toEqual(['wrong', 'wrong', 'wrong', 'rate_limited']);
}

/** One address alone at an account spends its own budget, never the account's: 70 wrong, then the right password elsewhere passes. */
export async function expectOneAddressNotToSpendTheAccount(limiter: RateLimiter): Promise<void> {
  const email = `hammered-${randomUUID()}@example.test`;
  const hammer: string[] = [];
  for (let i = 0; i < 70; i++) hammer.push(await attempt(limiter, email, '203.0.113.200', `guess ${i}`));
  expect(tally(hammer)).toEqual({ wrong: 10, rate_limited: 60 });
  // the other addresses' budgets at the account are whole: 10 more from each before a refusal
  const next: string[] = [];
  for (let i = 0; i < 11; i++) next.push(await attempt(limiter, email, '198.51.100.9', `elsewhere ${i}`));
  expect(next).toEqual([...Array<string>(10).fill('wrong'), 'rate_limited']);
  expect(await attempt(limiter, email, '198.51.100.10', RIGHT)).toBe('ok');
}
