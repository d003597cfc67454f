import { sql } from 'drizzle-orm';
import { DomainError, type ServiceDeps } from '@lab/kit';

/**
 * Spends a consent form once (decision 049). The gateway keeps no session, so the
 * form's signed state alone would stay valid for its whole lifetime: recording its
 * nonce here, in one statement that either inserts or finds the row, makes a second
 * post of it fail on any replica, however close the two posts are.
 */
export async function useOAuthForm(deps: ServiceDeps, input: { form_id: string; expires_at: string }): Promise<void> {
  const used = await deps.db.rows<{ form_id: string }>(
    sql`insert into identity.oauth_used_forms (form_id, expires_at) values (${input.form_id}, ${input.expires_at}::timestamptz)
        on conflict (form_id) do nothing returning form_id`,
  );
  if (!used.length) throw DomainError.conflict('this form has already been used', 'form_used');
}
