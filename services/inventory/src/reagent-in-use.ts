import { DomainError } from '@lab/kit';

/** foreign_key_violation; restrict_violation is what PostgreSQL 18 reports for ON DELETE RESTRICT */
const REFERENCE_STILL_USED = new Set(['23503', '23001']);

function pgCode(err: unknown): string | undefined {
  for (let e = err as { code?: unknown; cause?: unknown } | undefined; e; e = e.cause as typeof e) {
    if (typeof e.code === 'string') return e.code;
  }
  return undefined;
}

/**
 * A catalog entry that still has stock items cannot be deleted: the foreign key
 * refuses it inside the delete's transaction (so a stock item created at the
 * same moment cannot slip past a check), and this turns that refusal into
 * 409 reagent_in_use. Delete the stock items first.
 */
export async function translateReagentInUse<T>(applies: boolean, run: () => Promise<T>): Promise<T> {
  try {
    return await run();
  } catch (err) {
    if (applies && REFERENCE_STILL_USED.has(pgCode(err) ?? '')) {
      throw DomainError.conflict('the reagent still has stock items; delete them first', 'reagent_in_use');
    }
    throw err;
  }
}
