import { sql, type SQL } from 'drizzle-orm';
import { z } from 'zod';
import type { webhooks } from '@lab/contracts';
import { DomainError, isUuid, parseWith, rows, type CallerContext, type Executor, type ServiceDeps } from '@lab/kit';

/**
 * What the management reads and undos of subscriptions and inbound endpoints
 * share: the page of a list, an item's id, the secret rotation's overlap.
 */

/** A timestamp column rendered by PostgreSQL as UTC ISO 8601 (pg and PGlite alike). */
export const iso = (col: string): SQL => sql.raw(`to_char(${col} at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`);

/** How long a replaced secret keeps working after a rotation (the management contract: 24 hours). */
const ROTATION_OVERLAP_HOURS = 24;

/**
 * The columns a rotation sets: the current secret becomes the previous one for
 * the overlap, the given one becomes current. A second rotation within the
 * overlap drops the oldest: at most two secrets work at once, as at most two v1
 * signatures are sent.
 */
const rotationSets = (secret: SQL): SQL =>
  sql`previous_secret = secret, previous_secret_expires_at = now() + ${ROTATION_OVERLAP_HOURS} * interval '1 hour',
      secret = ${secret}, updated_at = now()`;

const orgId = z.string().refine(isUuid, 'must be a UUID');
const pageBody = z.object({
  org_id: orgId,
  // 0 is proto's unset: the default
  limit: z.number().int().min(0).max(200),
  offset: z.number().int().min(0).max(1_000_000_000),
});

export interface Page {
  org_id: string;
  limit: number;
  offset: number;
}

export function parsePage(req: webhooks.PageRequest): Page {
  const p = parseWith(pageBody, req);
  return { org_id: p.org_id.toLowerCase(), limit: p.limit || 50, offset: p.offset };
}

/** The organisation and id of an item request; an id that is not a UUID names nothing there (404). */
export function parseItem(req: { org_id: string; id: string }, what: string): { org_id: string; id: string } {
  const { org_id } = parseWith(z.object({ org_id: orgId }), { org_id: req.org_id });
  if (!isUuid(req.id)) throw DomainError.notFound(`${what} not found`);
  return { org_id: org_id.toLowerCase(), id: req.id.toLowerCase() };
}

/** One page of an organisation's rows of `table`, oldest first, and their total. */
// eslint-disable-next-line @typescript-eslint/no-unnecessary-type-parameters -- the caller names the row type its columns give
export async function pageOf<T>(exec: Executor, table: SQL, columns: SQL, p: Page): Promise<{ rows: T[]; page: webhooks.Page }> {
  const [list, count] = await Promise.all([
    rows<T>(exec, sql`select ${columns} from ${table} where org_id = ${p.org_id}::uuid order by created_at, id limit ${p.limit} offset ${p.offset}`),
    rows<{ n: number }>(exec, sql`select count(*)::int as n from ${table} where org_id = ${p.org_id}::uuid`),
  ]);
  return { rows: list, page: { limit: p.limit, offset: p.offset, total: count[0]?.n ?? 0 } };
}

/**
 * Gives one record of `table` (a subscription or an inbound endpoint) the new
 * `secret`, the replaced one kept beside it for the overlap (rotationSets); the
 * audit entry holds the overlap's end, never a secret. notFound when the
 * organisation has no such record. `secret` is an expression of the row (a
 * subscription's new secret depends on its signature scheme, read in the same
 * statement so a concurrent change of scheme cannot pair a secret with the
 * other scheme); the answer is what was stored.
 */
export async function rotateSecret(
  deps: ServiceDeps,
  caller: CallerContext,
  target: { table: SQL; resource: string; org_id: string; id: string; notFound: () => DomainError },
  secret: SQL,
): Promise<webhooks.RotatedSecret> {
  const { table, resource, org_id, id } = target;
  return deps.outbox.write(caller, async (tx, emit) => {
    const [r] = await rows<{ secret: string; expires: string }>(
      tx,
      sql`update ${table} set ${rotationSets(secret)} where org_id = ${org_id}::uuid and id = ${id}::uuid
          returning secret, ${iso('previous_secret_expires_at')} as expires`,
    );
    if (!r) throw target.notFound();
    emit.audit(org_id, { action: 'rotate_secret', resource, record_id: id, after: { previous_secret_expires_at: r.expires } });
    return { secret: r.secret, previous_secret_expires_at: r.expires };
  });
}
