import { sql, type SQL } from 'drizzle-orm';
import { DomainError, type CallerContext } from '@lab/kit';

/**
 * An API key may be bound to a connector and/or to devices: it then acts only for
 * the devices of that connector and the devices listed. A key without a binding
 * acts for every device of its organisation.
 */
export const isBound = (c: CallerContext): boolean => !!c.connector_id || (c.device_ids?.length ?? 0) > 0;

/** SQL predicate on the devices alias `d`: devices the caller may act for (none when unbound). */
export function deviceScope(c: CallerContext, alias = 'd'): SQL | undefined {
  if (!isBound(c)) return undefined;
  const d = sql.raw(alias);
  const byConnector = c.connector_id ? sql`${d}.connector_id = ${c.connector_id}::uuid` : sql`false`;
  const ids = JSON.stringify(c.device_ids ?? []);
  return sql`(${byConnector} or ${d}.id in (select jsonb_array_elements_text(${ids}::jsonb)::uuid))`;
}

function mayActFor(c: CallerContext, device: { id: string; connector_id: string | null }): boolean {
  if (!isBound(c)) return true;
  return (!!c.connector_id && device.connector_id === c.connector_id) || (c.device_ids ?? []).includes(device.id);
}

export function assertMayActFor(c: CallerContext, device: { id: string; connector_id: string | null }): void {
  if (!mayActFor(c, device)) throw DomainError.forbidden('this API key may not act for this device', 'device_not_allowed');
}
