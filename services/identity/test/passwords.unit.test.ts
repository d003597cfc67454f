import { DomainError } from '@lab/kit';
import { PasswordChecks, findWithPassword, hashPassword, preparePasswordChecks } from '../src/passwords';

/** Whether a sign-in with this stored hash (null: unknown e-mail) and password succeeds. */
const signsIn = async (stored: string | null, password: string) => (await findWithPassword(async () => ({ password_hash: stored }), password)) !== null;

describe('password hashing', () => {
  it('uses argon2id and accepts only the right password', async () => {
    const stored = await hashPassword('correct horse battery');
    expect(stored.startsWith('$argon2id$')).toBe(true);
    expect(await signsIn(stored, 'correct horse battery')).toBe(true);
    expect(await signsIn(stored, 'correct horse batterY')).toBe(false);
  });

  it('fails without a stored hash or with a malformed one', async () => {
    expect(await signsIn(null, 'anything at all')).toBe(false);
    expect(await signsIn('not-a-hash', 'anything at all')).toBe(false);
  });
});

describe('bounded password checks', () => {
  /** A verify that waits until the test lets it finish, counting how many run at once. */
  function heldVerify() {
    const held: (() => void)[] = [];
    const seen = { calls: 0, active: 0, peak: 0, hashes: [] as string[] };
    const verify = async (hash: string, password: string) => {
      seen.calls++;
      seen.hashes.push(hash);
      seen.active++;
      seen.peak = Math.max(seen.peak, seen.active);
      await new Promise<void>((resolve) => held.push(resolve));
      seen.active--;
      return hash === `h:${password}`;
    };
    /** Lets the running verifies finish, then yields until the next ones have started. */
    const releaseRunning = async () => {
      for (const go of held.splice(0)) go();
      await new Promise((resolve) => setImmediate(resolve));
    };
    return { verify, seen, releaseRunning, held };
  }

  const settled = async (ps: Promise<unknown>[]) => {
    const state = ps.map(() => 'pending');
    ps.forEach((p, i) => {
      void p.then(
        () => (state[i] = 'ok'),
        (err: unknown) => (state[i] = err instanceof DomainError ? `${err.kind}/${err.code}` : `thrown:${String(err)}`),
      );
    });
    await new Promise((resolve) => setImmediate(resolve));
    return state;
  };

  it('runs at most `running` at once, queues at most `queued`, and refuses the overflow at once, before any lookup', async () => {
    await preparePasswordChecks(); // the dummy hash, so unknown emails do not wait on its first computation
    const { verify, seen, releaseRunning } = heldVerify();
    const checks = new PasswordChecks({ running: 2, queued: 3 }, verify);
    let lookups = 0;
    // 9 attempts: users u0..u8 exist with password p<i>, except every third (unknown email)
    const attempts = Array.from({ length: 9 }, (_, i) =>
      checks.check(async () => {
        lookups++;
        return i % 3 === 2 ? null : { id: `u${i}`, password_hash: `h:p${i}` };
      }, `p${i}`),
    );
    const early = await settled(attempts);
    // 2 running + 3 queued admitted; the last 4 refused while nothing has finished yet
    expect(early).toEqual([...Array(5).fill('pending'), ...Array(4).fill('unavailable/service_unavailable')]);
    expect(checks.load).toEqual({ running: 2, queued: 3 });
    expect(lookups).toBe(2); // queued attempts have not looked anything up yet; refused ones never will

    while (seen.calls < 5 || seen.active > 0) await releaseRunning();
    const results = await Promise.allSettled(attempts.slice(0, 5));
    expect(results.map((r) => (r.status === 'fulfilled' ? (r.value?.id ?? null) : 'rejected'))).toEqual(['u0', 'u1', null, 'u3', 'u4']);
    expect(seen.calls).toBe(5); // one verify per admitted attempt, unknown email included
    // the unknown email was verified against the dummy hash, the others against their own
    expect(seen.hashes.filter((h) => h.startsWith('$argon2id$'))).toHaveLength(1);
    expect(seen.hashes.filter((h) => h.startsWith('h:')).sort()).toEqual(['h:p0', 'h:p1', 'h:p3', 'h:p4']);
    expect(lookups).toBe(5);
    expect(seen.peak).toBe(2);
    expect(checks.load).toEqual({ running: 0, queued: 0 });

    // the slots all came back: a full round is admitted again
    const again = Array.from({ length: 5 }, (_, i) => checks.check(async () => ({ password_hash: 'h:x' }), i ? 'x' : 'wrong'));
    expect(await settled(again)).toEqual(Array(5).fill('pending'));
    while (seen.active > 0 || checks.load.queued > 0) await releaseRunning();
    expect(await Promise.all(again)).toEqual([null, ...Array(4).fill({ password_hash: 'h:x' })]);
    expect(seen.peak).toBe(2);
  });

  it('frees the slot when the lookup or the verify fails', async () => {
    const checks = new PasswordChecks({ running: 1, queued: 0 }, async () => {
      throw new Error('malformed hash');
    });
    expect(await checks.check(async () => ({ password_hash: 'bad' }), 'x')).toBeNull();
    await expect(checks.check(async () => Promise.reject(new Error('db down')), 'x')).rejects.toThrow('db down');
    expect(checks.load).toEqual({ running: 0, queued: 0 });
    expect(await checks.check(async () => ({ password_hash: 'bad' }), 'x')).toBeNull();
  });

  it('with no queue, refuses every attempt beyond the running ones', async () => {
    const { verify, releaseRunning } = heldVerify();
    const checks = new PasswordChecks({ running: 1, queued: 0 }, verify);
    const attempts = [0, 1, 2].map(() => checks.check(async () => ({ password_hash: 'h:x' }), 'x'));
    expect(await settled(attempts)).toEqual(['pending', 'unavailable/service_unavailable', 'unavailable/service_unavailable']);
    await releaseRunning();
    expect(await attempts[0]).toEqual({ password_hash: 'h:x' });
  });
});
