import { checkPassword, hashPassword } from '../src/passwords';

describe('password hashing', () => {
  it('uses argon2id and accepts only the right password', async () => {
    const stored = await hashPassword('correct horse battery');
    expect(stored.startsWith('$argon2id$')).toBe(true);
    expect(await checkPassword(stored, 'correct horse battery')).toBe(true);
    expect(await checkPassword(stored, 'correct horse batterY')).toBe(false);
  });

  it('fails without a stored hash or with a malformed one', async () => {
    expect(await checkPassword(null, 'anything at all')).toBe(false);
    expect(await checkPassword('not-a-hash', 'anything at all')).toBe(false);
  });
});
