import { commonEnv, ConfigError, loadConfig } from '@lab/kit';

describe('DATABASE_PREPARED_STATEMENTS and DATABASE_DIRECT_URL', () => {
  test('named statements by default; "false" (a transaction-mode pooler before PgBouncer 1.21) turns them off', () => {
    expect(loadConfig(commonEnv, {}).DATABASE_PREPARED_STATEMENTS).toBe(true);
    expect(loadConfig(commonEnv, { DATABASE_PREPARED_STATEMENTS: 'true' }).DATABASE_PREPARED_STATEMENTS).toBe(true);
    expect(loadConfig(commonEnv, { DATABASE_PREPARED_STATEMENTS: 'false' }).DATABASE_PREPARED_STATEMENTS).toBe(false);
  });

  test('a value other than "true" or "false" fails the start, naming the variable, rather than guessing', () => {
    for (const v of ['no', '0', 'False', '']) {
      expect(() => loadConfig(commonEnv, { DATABASE_PREPARED_STATEMENTS: v })).toThrow(ConfigError);
      expect(() => loadConfig(commonEnv, { DATABASE_PREPARED_STATEMENTS: v })).toThrow(/DATABASE_PREPARED_STATEMENTS/);
    }
  });

  test('the direct URL is optional and must be a URL', () => {
    expect(loadConfig(commonEnv, {}).DATABASE_DIRECT_URL).toBeUndefined();
    const url = 'postgres://notebook:secret@pg-rw.data:5432/lab_notebook';
    expect(loadConfig(commonEnv, { DATABASE_DIRECT_URL: url }).DATABASE_DIRECT_URL).toBe(url);
    expect(() => loadConfig(commonEnv, { DATABASE_DIRECT_URL: 'pg-rw.data' })).toThrow(/DATABASE_DIRECT_URL/);
  });
});
