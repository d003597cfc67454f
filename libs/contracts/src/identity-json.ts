// Written by hand: how identity's messages (lab.identity.v1) are written as the
// JSON the management API answers. Objects, not text: the gateway's envelopes
// (json, the admin list envelope) write them. Fields in the order the API has
// always written them; an unset optional is null, an empty creation time is left out.
import type {
  Department,
  IssuedToken,
  Member,
  OAuthClient,
  OAuthClientCredentials,
  Org,
  TokenInfo,
  User,
  UserWithMemberships,
} from './lab/identity/v1/identity.js';

export const orgObject = (o: Org) => ({
  id: o.id,
  name: o.name,
  modules: o.modules,
  rate_limit: o.rate_limit ?? null,
  created_at: o.created_at || undefined,
});

export const departmentObject = (d: Department) => ({ id: d.id, org_id: d.org_id, name: d.name, created_at: d.created_at || undefined });

/** A department as its creation answers it. */
export const newDepartmentObject = (d: Department) => ({ id: d.id, org_id: d.org_id, name: d.name });

/** A user with the organisations they belong to. */
export const userObject = (u: UserWithMemberships) => ({
  id: u.id,
  email: u.email,
  name: u.name ?? null,
  created_at: u.created_at,
  memberships: u.memberships.map((m) => ({ org_id: m.org_id, org_name: m.org_name, role: m.role, department_id: m.department_id ?? null })),
});

/** A user as their creation answers it. */
export const newUserObject = (u: User) => ({ id: u.id, email: u.email, name: u.name ?? null });

/** A member of an organisation, with who they are. */
export const memberObject = (m: Member) => ({
  org_id: m.org_id,
  user_id: m.user_id,
  email: m.email ?? null,
  name: m.name ?? null,
  role: m.role,
  department_id: m.department_id ?? null,
  created_at: m.created_at,
});

/** A membership as setting it answers: the organisation, the user, the role and department. */
export const membershipObject = (m: Member) => ({ org_id: m.org_id, user_id: m.user_id, role: m.role, department_id: m.department_id ?? null });

/** A token without its secret: what identifies it, what it may do, when it was made and last used. */
export const tokenObject = (t: TokenInfo) => ({
  id: t.id,
  name: t.name ?? null,
  prefix: t.prefix ?? null,
  scopes: t.scopes,
  org_id: t.org_id ?? null,
  user_id: t.user_id ?? null,
  ...(t.kind === 'api_key' ? { connector_id: t.connector_id ?? null, device_ids: t.device_ids } : {}),
  created_at: t.created_at,
  last_used_at: t.last_used_at ?? null,
  expires_at: t.expires_at ?? null,
});

/** A new API key with its secret, shown this once, and the user it acts for. */
export const issuedApiKeyObject = (t: IssuedToken) => ({ id: t.id, token: t.token, scopes: t.scopes, user_id: t.user_id ?? null });

/** A new personal access token with its secret, shown this once, and the organisation it is bound to. */
export const issuedPatObject = (t: IssuedToken) => ({ id: t.id, token: t.token, scopes: t.scopes, org_id: t.org_id ?? null });

export const oauthClientObject = (c: OAuthClient) => ({
  client_id: c.client_id,
  name: c.name,
  redirect_uris: c.redirect_uris,
  scopes: c.scopes,
  created_at: c.created_at,
  // true for a client an MCP client registered itself (no secret; identity provider only)
  public: c.public,
  // the URL of its client ID metadata document, for a client named by one (its client_id at sign-in)
  ...(c.metadata_url ? { metadata_url: c.metadata_url } : {}),
});

/** A new confidential client's credentials, the secret shown this once. */
export const oauthClientCredentialsObject = (c: OAuthClientCredentials) => ({ client_id: c.client_id, client_secret: c.client_secret });
