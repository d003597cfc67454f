import type { identity } from '@lab/contracts';

type Principal = identity.Principal;

interface Entry {
  principal: Principal;
  expires: number;
}

/**
 * Resolved principals by (token hash, selected organisation), kept for a short
 * TTL so the common request makes one gRPC hop. Identity's events drop entries
 * early (revoked token, changed membership, updated organisation). Concurrent
 * lookups of one key share a single resolution; a resolution that overlaps an
 * invalidation is answered but not cached, so a stale principal never sticks.
 */
export class PrincipalCache {
  private readonly entries = new Map<string, Entry>();
  private readonly inflight = new Map<string, Promise<Principal>>();
  private generation = 0;

  constructor(
    private readonly ttlMs: number,
    private readonly maxEntries = 50_000,
    private readonly now: () => number = Date.now,
  ) {}

  static key(tokenHash: string, orgId: string | undefined): string {
    return `${tokenHash}|${orgId ?? ''}`;
  }

  async get(key: string, resolve: () => Promise<Principal>): Promise<Principal> {
    const hit = this.entries.get(key);
    if (hit && hit.expires > this.now()) return hit.principal;
    if (hit) this.entries.delete(key);
    const pending = this.inflight.get(key);
    if (pending) return pending;
    const generation = this.generation;
    const p = resolve().then(
      (principal) => {
        this.inflight.delete(key);
        if (generation === this.generation && this.ttlMs > 0) this.put(key, principal);
        return principal;
      },
      (err: unknown) => {
        this.inflight.delete(key);
        throw err;
      },
    );
    this.inflight.set(key, p);
    return p;
  }

  private put(key: string, principal: Principal): void {
    if (this.entries.size >= this.maxEntries) {
      // Maps iterate in insertion order: drop the oldest entry.
      const oldest = this.entries.keys().next().value;
      if (oldest !== undefined) this.entries.delete(oldest);
    }
    this.entries.set(key, { principal, expires: this.now() + this.ttlMs });
  }

  get size(): number {
    return this.entries.size;
  }

  dropToken(tokenId: string): void {
    this.dropTokens([tokenId]);
  }

  /** The tokens a refresh ended, in one pass over the cache (nothing to do when there are none). */
  dropTokens(tokenIds: readonly string[]): void {
    if (!tokenIds.length) return;
    const ended = new Set(tokenIds);
    this.drop((p) => ended.has(p.token_id));
  }

  dropMember(orgId: string, userId: string): void {
    this.drop((p) => p.org_id === orgId && p.user_id === userId);
  }

  dropOrg(orgId: string): void {
    this.drop((p) => p.org_id === orgId);
  }

  private drop(match: (p: Principal) => boolean): void {
    this.generation++;
    for (const [key, entry] of this.entries) if (match(entry.principal)) this.entries.delete(key);
  }
}

/** Applies one of identity's bus events to the cache; other events are ignored. */
export function invalidateFromEvent(cache: PrincipalCache, type: string, data: unknown): void {
  const d = (data ?? {}) as { token_id?: unknown; org_id?: unknown; user_id?: unknown };
  const str = (v: unknown) => (typeof v === 'string' ? v : undefined);
  switch (type) {
    case 'identity.token.revoked': {
      const id = str(d.token_id);
      if (id) cache.dropToken(id);
      break;
    }
    case 'identity.member.changed':
    case 'identity.member.removed': {
      const org = str(d.org_id);
      const user = str(d.user_id);
      if (org && user) cache.dropMember(org, user);
      break;
    }
    case 'identity.org.updated': {
      const org = str(d.org_id);
      if (org) cache.dropOrg(org);
      break;
    }
  }
}
