import { createHash, randomUUID } from 'node:crypto';
import { rm } from 'node:fs/promises';
import { sql } from 'drizzle-orm';
import { createLogger, migrate, openDatabase, type Database, type ServiceDeps } from '@lab/kit';
import { definition } from '@lab/identity';
import { expiredTokens, purgeExpiredTokens, purgeUsedForms } from '../src/retention';
import { dropFreshDatabases, freshDatabaseUrl } from '../../../testing/src/backing';

/** used only when no DATABASE_URL is set (embedded PGlite) */
const dataDir = `/tmp/identity-retention-test-${randomUUID()}`;
let db: Database;

beforeAll(async () => {
  db = await openDatabase({ url: await freshDatabaseUrl(), dataDir, name: 'identity-retention-test' });
  await migrate(db, 'identity', definition.migrationsDir);
});

afterAll(async () => {
  await db?.close();
  await dropFreshDatabases();
  await rm(dataDir, { recursive: true, force: true });
});

const hash = () => createHash('sha256').update(randomUUID()).digest('hex');
/** `now()` moved by whole days: positive is in the past. */
const daysAgo = (days: number) => sql`now() - (${days} * interval '1 day')`;

/** An org, a user, an OAuth client and a grant of their own, so each test sees only its rows. */
async function fixture() {
  const [org, user, client, grant] = [randomUUID(), randomUUID(), randomUUID(), randomUUID()];
  await db.rows(sql`insert into identity.orgs (id, name) values (${org}, 'retention')`);
  await db.rows(sql`insert into identity.users (id, email) values (${user}, ${`r-${user}@example.org`})`);
  await db.rows(sql`insert into identity.oauth_clients (id, name, secret_hash, redirect_uris, scopes)
    values (${client}, 'app', ${hash()}, array['https://app.example.org/cb'], array['read'])`);
  await db.rows(sql`insert into identity.oauth_grants (id, client_id, user_id, org_id, scopes, revoked_at)
    values (${grant}, ${client}, ${user}, ${org}, array['read'], now() - interval '30 days')`);
  const session = randomUUID();

  /** A token of `kind` that expired `expiredDaysAgo` days ago (negative: still live; null: no expiry). */
  async function token(kind: string, expiredDaysAgo: number | null, revoked = false): Promise<string> {
    const id = randomUUID();
    const sessionId = kind === 'session' || kind === 'refresh' ? session : null;
    const grantId = kind === 'oauth' || kind === 'oauth_refresh' ? grant : null;
    await db.rows(sql`insert into identity.tokens (id, kind, token_hash, org_id, user_id, session_id, grant_id, expires_at, revoked_at, created_at)
      values (${id}, ${kind}, ${hash()}, ${kind === 'api_key' ? org : null}, ${user}, ${sessionId}, ${grantId},
        ${expiredDaysAgo === null ? null : daysAgo(expiredDaysAgo)}, ${revoked ? daysAgo(40) : null}, ${daysAgo(400)})`);
    return id;
  }

  async function code(expiredDaysAgo: number, used: boolean): Promise<string> {
    const id = randomUUID();
    await db.rows(sql`insert into identity.oauth_codes (id, grant_id, code_hash, client_id, redirect_uri, expires_at, used_at)
      values (${id}, ${grant}, ${hash()}, ${client}, 'https://app.example.org/cb', ${daysAgo(expiredDaysAgo)},
        ${used ? daysAgo(expiredDaysAgo + 0.001) : null})`);
    return id;
  }

  return { org, user, client, grant, token, code };
}

const present = async (table: 'tokens' | 'oauth_codes', ids: string[]) =>
  (await db.rows<{ id: string }>(sql`select id from ${sql.raw(`identity.${table}`)} where id = any(${sql.param(ids)}::uuid[])`)).map((r) => r.id).sort();

const SHORT_LIVED = ['session', 'refresh', 'oauth', 'oauth_refresh'];

describe('identity retention', () => {
  it('purges short-lived tokens and OAuth codes past their grace, and nothing else', async () => {
    const f = await fixture();
    const gone: string[] = [];
    const kept: string[] = [];
    for (const kind of SHORT_LIVED) {
      gone.push(await f.token(kind, 8), await f.token(kind, 8, true), await f.token(kind, 300, true));
      // within the 7-day grace, just expired, and live (rotated-and-revoked ones keep serving reuse detection)
      kept.push(await f.token(kind, 6, true), await f.token(kind, 0.01), await f.token(kind, -1), await f.token(kind, -20, true));
    }
    // API keys and PATs stay whatever their state, even one carrying a long-past expiry
    kept.push(
      await f.token('api_key', null),
      await f.token('api_key', null, true),
      await f.token('pat', null),
      await f.token('pat', null, true),
      await f.token('pat', 300, true),
    );
    const codesGone = [await f.code(2, true), await f.code(2, false), await f.code(90, true)];
    const codesKept = [await f.code(0.5, true), await f.code(0.5, false), await f.code(-0.001, false)];

    // through the service definition's rules, as the kit's housekeeping runs them
    for (const [, run] of definition.retention!({ db, log: createLogger('test', 'silent') } as ServiceDeps)) await run();

    expect(await present('tokens', [...gone, ...kept])).toEqual([...kept].sort());
    expect(await present('oauth_codes', [...codesGone, ...codesKept])).toEqual([...codesKept].sort());
    // the grant (revoked, its tokens partly gone), its client, the user and the org all stay
    const [left] = await db.rows<{ grants: number; clients: number; users: number; orgs: number }>(sql`select
      (select count(*)::int from identity.oauth_grants where id = ${f.grant}) as grants,
      (select count(*)::int from identity.oauth_clients where id = ${f.client}) as clients,
      (select count(*)::int from identity.users where id = ${f.user}) as users,
      (select count(*)::int from identity.orgs where id = ${f.org}) as orgs`);
    expect(left).toEqual({ grants: 1, clients: 1, users: 1, orgs: 1 });
  });

  it('deletes in batches until none are left', async () => {
    const f = await fixture();
    const expired = await Promise.all(Array.from({ length: 7 }, (_, i) => f.token(SHORT_LIVED[i % 4]!, 10)));
    const live = await f.token('refresh', -1);
    const purged = await purgeExpiredTokens(db, 3);
    expect(purged).toBeGreaterThanOrEqual(7);
    expect(await present('tokens', [...expired, live])).toEqual([live]);
  });

  it('forgets a spent consent form once it has expired, and keeps one still live', async () => {
    const [expired, live] = [randomUUID(), randomUUID()];
    await db.rows(sql`insert into identity.oauth_used_forms (form_id, expires_at)
      values (${expired}, now() - interval '1 minute'), (${live}, now() + interval '10 minutes')`);
    expect(await purgeUsedForms(db)).toBeGreaterThanOrEqual(1);
    const left = await db.rows<{ form_id: string }>(sql`select form_id from identity.oauth_used_forms where form_id in (${expired}, ${live})`);
    expect(left.map((r) => r.form_id)).toEqual([live]);
  });

  it('lets the partial expiry index serve the token purge', async () => {
    // enable_seqscan off: on a tiny table the planner would scan anyway; this asks only whether the index is usable
    const plan = await db.tx(async (tx) => {
      await tx.execute(sql`set local enable_seqscan = off`);
      return db.rows<Record<string, string>>(sql`explain select ctid from identity.tokens where ${expiredTokens(7)} limit 5000`, tx);
    });
    expect(plan.map((r) => Object.values(r)[0]).join('\n')).toContain('tokens_expiring_idx');
  });
});
