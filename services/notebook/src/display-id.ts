import { sql } from 'drizzle-orm';
import { rows, type Tx } from '@lab/kit';

/**
 * Allocates the next human-readable code of an organisation (EXP-000001) from a
 * counter row bumped in the creating transaction: the row lock serialises
 * concurrent creators, and a rolled-back create leaves no gap-causing state
 * behind, since the bump rolls back with it.
 */
export async function nextDisplayId(tx: Tx, orgId: string, prefix: string): Promise<string> {
  const [row] = await rows<{ n: number }>(
    tx,
    sql`insert into notebook.display_counters (org_id, kind, n) values (${orgId}::uuid, ${prefix}, 1)
        on conflict (org_id, kind) do update set n = notebook.display_counters.n + 1
        returning n::int as n`,
  );
  return `${prefix}-${String(row!.n).padStart(6, '0')}`;
}
