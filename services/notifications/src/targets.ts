import type { identity } from '@lab/contracts';
import { DomainError, type CallerContext, type PeerClient } from '@lab/kit';

export type IdentityPeer = PeerClient<typeof identity.IdentityServiceService>;

/** Who a notification is for, as the request names them. */
export type Targets = { user_ids: string[] } | { role: string };

/**
 * The organisation members among the targets, in the order given (by role:
 * identity's order). Non-members are dropped. A role identity does not know has
 * no holders, so its refusal of the name counts as "nobody" rather than a 400:
 * the spec leaves role a free string of 1 to 64 characters.
 */
export async function resolveMembers(peer: IdentityPeer, caller: CallerContext, org_id: string, t: Targets): Promise<string[]> {
  try {
    const res = await peer.get().call('listMembers', 'role' in t ? { org_id, user_ids: [], role: t.role } : { org_id, user_ids: t.user_ids }, caller);
    const members = new Set(res.members.map((m) => m.user_id.toLowerCase()));
    if ('role' in t) return [...members];
    return [...new Set(t.user_ids.map((u) => u.toLowerCase()))].filter((u) => members.has(u));
  } catch (err) {
    if (err instanceof DomainError && err.kind === 'invalid' && 'role' in t) return [];
    throw err;
  }
}
