import { DomainError } from '@lab/kit';
import type { identity } from '@lab/contracts';
import { scopesForRole } from './scopes.js';

/** One token joined with the org it acts in and its user's membership there. */
export interface TokenContextRow {
  token_id: string;
  kind: string;
  user_id: string | null;
  /** org the token is bound to; null for unbound tokens */
  bound_org_id: string | null;
  scopes: string[];
  connector_id: string | null;
  device_ids: string[];
  /** the selected org, when it exists */
  org_id: string | null;
  modules: string[] | null;
  per_minute: number | null;
  per_hour: number | null;
  /** membership of user_id in org_id, when there is one */
  role: string | null;
  department_id: string | null;
  /** the resource an OAuth grant is bound to (RFC 8707); null for other tokens */
  audience?: string | null;
}

/** The org a token acts in: its bound org, else the one the request selected. */
function selectOrg(boundOrgId: string | null, requestedOrgId: string | undefined): string {
  if (boundOrgId) {
    if (requestedOrgId && requestedOrgId !== boundOrgId) {
      throw DomainError.forbidden('the token is bound to another organisation', 'org_mismatch');
    }
    return boundOrgId;
  }
  if (!requestedOrgId) {
    throw DomainError.invalid('select an organisation with the org_id query parameter or the X-Org-Id header', undefined, 'org_required');
  }
  return requestedOrgId;
}

const notAMember = () => DomainError.forbidden('not a member of this organisation', 'not_a_member');

/**
 * Rules of ResolveToken once the row is loaded (null: no live token with that
 * hash). Refresh tokens are never bearer tokens. A missing org answers like a
 * missing membership, so org ids cannot be probed.
 */
export function toPrincipal(row: TokenContextRow | null, requestedOrgId: string | undefined): identity.Principal {
  if (!row || row.kind === 'refresh' || row.kind === 'oauth_refresh') throw DomainError.unauthenticated();
  const orgId = selectOrg(row.bound_org_id, requestedOrgId);
  if (row.org_id !== orgId) throw notAMember();
  if (row.user_id && !row.role) throw notAMember();
  return {
    token_id: row.token_id,
    token_kind: row.kind,
    ...(row.user_id ? { user_id: row.user_id } : {}),
    org_id: orgId,
    // The role is read on every resolve: an admin demoted after consenting loses
    // the admin-only scopes of the OAuth grant at once.
    scopes: row.kind === 'oauth' ? scopesForRole(row.scopes, row.role) : row.scopes,
    ...(row.role ? { role: row.role } : {}),
    ...(row.department_id ? { department_id: row.department_id } : {}),
    ...(row.connector_id ? { connector_id: row.connector_id } : {}),
    device_ids: row.device_ids,
    modules: row.modules ?? [],
    rate_limit: { per_minute: row.per_minute!, per_hour: row.per_hour! },
    org_bound: row.bound_org_id !== null,
    ...(row.audience ? { audience: row.audience } : {}),
  };
}
