import { createHash, timingSafeEqual } from 'node:crypto';
import type { Request } from 'express';
import type { identity } from '@lab/contracts';
import { hashToken, parseApiKeyOrg, tokenKindOf } from '@lab/identity';
import { DomainError, isUuid, operatorContext, systemContext, validationFailed, type CallerContext } from '@lab/kit';
import type { Clients } from './clients.js';
import { PrincipalCache } from './principal-cache.js';

export type Principal = identity.Principal;

/** Token kinds the public API (/v1) accepts; user sign-in sessions are not among them. */
const PUBLIC_KINDS = new Set(['api_key', 'pat', 'oauth']);
/** Sign-in tokens (access `ses_`, refresh `ref_`) are told apart by prefix before any lookup. */
const isSignInToken = (token: string) => token.startsWith('ses_') || token.startsWith('ref_');
const isSessionToken = (token: string) => token.startsWith('ses_');

/** The bearer token of an Authorization header, or 401. */
export function bearerOf(header: string | undefined): string {
  const m = header ? /^Bearer[ ]+([^\s]+)\s*$/i.exec(header) : null;
  if (!m) throw DomainError.unauthenticated();
  return m[1]!;
}

const one = (v: unknown): string | undefined => {
  if (v === undefined) return undefined;
  if (typeof v === 'string') return v;
  throw validationFailed([{ path: 'org_id', message: 'must be given once' }], 'org_id given more than once');
};

/**
 * The organisation a request selects, from query `org_id` or header `X-Org-Id`.
 * Both may be given only if they agree; a value that is not a UUID is 400.
 */
export function orgSelection(query: unknown, header: string | string[] | undefined): string | undefined {
  const fromQuery = one(query);
  const fromHeader = one(header);
  for (const [path, v] of [
    ['org_id', fromQuery],
    ['X-Org-Id', fromHeader],
  ] as const) {
    if (v !== undefined && !isUuid(v)) throw validationFailed([{ path, message: 'must be a UUID' }], `${path} must be a UUID`);
  }
  if (fromQuery && fromHeader && fromQuery.toLowerCase() !== fromHeader.toLowerCase()) {
    throw DomainError.invalid('org_id and X-Org-Id name different organisations', {
      fields: [{ path: 'org_id', message: 'differs from X-Org-Id' }],
    });
  }
  return (fromQuery ?? fromHeader)?.toLowerCase();
}

/** The caller context passed (signed) on every gRPC call of a request. */
export function callerOf(p: Principal, requestId: string): CallerContext {
  return {
    org_id: p.org_id,
    user_id: p.user_id ?? null,
    role: p.role ?? null,
    department_id: p.department_id ?? null,
    scopes: p.scopes,
    token_kind: p.token_kind,
    token_id: p.token_id,
    request_id: requestId,
    connector_id: p.connector_id ?? null,
    device_ids: p.device_ids,
  };
}

export function operatorCaller(requestId: string, orgId: string | null): CallerContext {
  return operatorContext(requestId, orgId);
}

const digest = (s: string) => createHash('sha256').update(s, 'utf8').digest();

/**
 * Establishes who is calling: public API tokens and user sessions through
 * identity's ResolveToken (cached), the operator by constant-time comparison.
 */
export class Authenticator {
  private readonly operatorDigest: Buffer;

  constructor(
    private readonly clients: Clients,
    readonly cache: PrincipalCache,
    operatorToken: string,
  ) {
    this.operatorDigest = digest(operatorToken);
  }

  /** API key, PAT or OAuth token on /v1, acting in one organisation. */
  async publicApi(req: Request, requestId: string): Promise<Principal> {
    const token = bearerOf(req.headers.authorization);
    if (isSignInToken(token)) throw DomainError.unauthenticated('sign-in tokens are not accepted on the public API');
    const keyOrg = parseApiKeyOrg(token);
    const org = await this.selected(token, requestId, () => {
      const selected = orgSelection(req.query.org_id, req.headers['x-org-id']);
      // an API key carries its organisation: a different selection is refused
      if (keyOrg && selected && keyOrg !== selected) throw DomainError.forbidden('the API key belongs to another organisation', 'org_mismatch');
      return selected;
    });
    const principal = await this.resolve(token, keyOrg ? undefined : org, requestId);
    if (!PUBLIC_KINDS.has(principal.token_kind)) throw DomainError.unauthenticated();
    // A token issued for one resource (RFC 8707: an MCP client's) serves only there.
    if (principal.audience) throw DomainError.unauthenticated(`this token is bound to ${principal.audience} and is not accepted on the public API`);
    return principal;
  }

  /** A signed-in user's access token; the organisation comes from X-Org-Id. */
  async session(req: Request, requestId: string): Promise<Principal> {
    const token = bearerOf(req.headers.authorization);
    if (!isSessionToken(token)) throw DomainError.unauthenticated('a user access token is required');
    const org = await this.selected(token, requestId, () => {
      const selected = orgSelection(undefined, req.headers['x-org-id']);
      if (!selected)
        throw DomainError.invalid('X-Org-Id is required', { field: 'X-Org-Id', fields: [{ path: 'X-Org-Id', message: 'is required' }] }, 'org_required');
      return selected;
    });
    const principal = await this.resolve(token, org, requestId);
    if (principal.token_kind !== 'session' || !principal.user_id) throw DomainError.unauthenticated('a user access token is required');
    return principal;
  }

  /**
   * The MCP function: only a signed-in user's own access tokens, a sign-in token
   * (`ses_`, organisation from X-Org-Id) or an OAuth access token (`oat_`, the
   * organisation of its grant); never API keys or PATs. An OAuth token bound to a
   * resource (RFC 8707) must be bound to `audience`, this function's URL.
   */
  async user(req: Request, requestId: string, audience: string): Promise<Principal> {
    const token = bearerOf(req.headers.authorization);
    const kind = tokenKindOf(token);
    if (kind !== 'session' && kind !== 'oauth')
      throw DomainError.unauthenticated("a signed-in user's access token is required (API keys and PATs are not accepted)");
    const selected = await this.selected(token, requestId, () => orgSelection(undefined, req.headers['x-org-id']));
    // AI clients send the bearer token alone: a user of one organisation acts in it
    const org = kind === 'session' && !selected ? await this.soleOrg(token, requestId) : selected;
    const principal = await this.resolve(token, org, requestId);
    if (principal.token_kind !== kind || !principal.user_id) throw DomainError.unauthenticated();
    if (principal.audience !== undefined && principal.audience !== audience)
      throw DomainError.unauthenticated(`this token is bound to another resource: ${principal.audience}`);
    return principal;
  }

  operator(req: Request): void {
    const token = bearerOf(req.headers.authorization);
    if (!timingSafeEqual(digest(token), this.operatorDigest)) throw DomainError.unauthenticated('invalid operator token');
  }

  /**
   * The organisation a request selects. A selection that is refused (malformed,
   * repeated, missing, another than an API key's own) is told only to a caller whose token is valid: a missing or
   * unknown token is 401 whatever else the request holds. The extra lookup is paid
   * by refused requests alone.
   */
  private async selected<T>(token: string, requestId: string, select: () => T): Promise<T> {
    try {
      return select();
    } catch (refused) {
      await this.resolve(token, undefined, requestId).catch((err: unknown) => {
        if (err instanceof DomainError && err.kind === 'unauthenticated') throw err;
      });
      throw refused;
    }
  }

  /**
   * The organisation of a sign-in token sent without X-Org-Id: the user's only
   * one. With several (or none) the request is 400 org_required, naming the user's
   * organisations and how to choose (the header, or an OAuth token, bound to one).
   */
  private async soleOrg(token: string, requestId: string): Promise<string> {
    const identity = this.clients.identity();
    const user = await identity.call('resolveSessionUser', { token_hash: hashToken(token) }, systemContext(requestId));
    const { orgs } = await identity.call('listUserOrgs', { user_id: user.id }, systemContext(requestId));
    if (orgs.length === 1) return orgs[0]!.org_id;
    const message = orgs.length
      ? `you are a member of ${orgs.length} organisations: send X-Org-Id with the id of one (or use an OAuth access token, which is bound to one)`
      : 'you are a member of no organisation';
    throw DomainError.invalid(
      message,
      { field: 'X-Org-Id', fields: [{ path: 'X-Org-Id', message: 'is required' }], organisations: orgs.map((o) => ({ id: o.org_id, name: o.name })) },
      'org_required',
    );
  }

  private resolve(token: string, org: string | undefined, requestId: string): Promise<Principal> {
    const tokenHash = hashToken(token);
    return this.cache.get(PrincipalCache.key(tokenHash, org), () =>
      this.clients.identity().call('resolveToken', { token_hash: tokenHash, org_id: org }, systemContext(requestId)),
    );
  }
}
