import { z } from 'zod';
import { hasControlCharacters, isoTimestamp, isUuid, parseWith, rateLimitBody, storableText } from '@lab/kit';
import { MODULES, ROLES } from './model.js';
import { SCOPES, unknownScopes } from '@lab/permissions';

/**
 * Request schemas of the service edge. proto3 delivers unset strings as '' and
 * unset messages as undefined; `optional` fields arrive as undefined.
 */
const uuid = z
  .string()
  .refine((v) => isUuid(v), 'must be a UUID')
  .transform((v) => v.toLowerCase());

/** Text PostgreSQL cannot hold: refused here (400), not by a failed statement (500). */
const NUL = 'must not contain NUL characters or unpaired surrogates';

const name = z.string().trim().min(1).max(200).refine(storableText, NUL);
const email = z.string().trim().pipe(z.email().max(320));
const password = z.string().min(8).max(1024);
const unique = <T>(xs: T[]) => [...new Set(xs)];

/** Most items a modules list may have (repeats are folded away); the gateway documents the same. */
export const MODULES_MAX_ITEMS = MODULES.length * 4;

// Canonical order and no duplicates, so equal sets compare equal in audit diffs.
const modules = z
  .array(z.enum(MODULES))
  .max(MODULES_MAX_ITEMS)
  .transform((xs) => MODULES.filter((m) => xs.includes(m)));
const rateLimit = rateLimitBody;
const scopes = z
  .array(z.string())
  .min(1, 'at least one scope')
  .max(SCOPES.length * 4)
  .superRefine((xs, ctx) => {
    const bad = unknownScopes(xs);
    if (bad.length) ctx.addIssue({ code: 'custom', message: `unknown scopes: ${bad.join(', ')} (allowed: ${SCOPES.join(', ')})` });
  })
  .transform(unique);

/**
 * A URI that is the URI it reads as. The URL parser takes a backslash for a slash
 * in an http(s) URI, so `https://a.example\@b.example/` reads as b.example and
 * sends the browser to a.example; it strips tabs and newlines and encodes other
 * control characters, and CR/LF in a stored URI could split a header it is put in.
 */
const literalUri = (value: string): boolean => !value.includes('\\') && !hasControlCharacters(value);

/**
 * A registrable OAuth redirect URI: absolute https, or http on the loopback host
 * (native and development clients); no fragment (RFC 6749 3.1.2), no backslash or
 * control character (literalUri). It is stored as parsed (normalisedRedirectUri).
 */
export function isAllowedRedirectUri(value: string): boolean {
  if (value.includes('#') || !literalUri(value)) return false;
  let u: URL;
  try {
    u = new URL(value);
  } catch {
    return false;
  }
  if (u.username || u.password) return false;
  if (u.protocol === 'https:') return u.hostname.length > 0;
  return u.protocol === 'http:' && (u.hostname === 'localhost' || u.hostname === '127.0.0.1');
}

/** A loopback http URI (RFC 8252 7.3: 127.0.0.1 or localhost), parsed; null for anything else. */
function loopbackUri(value: string): URL | null {
  if (value.includes('#') || !URL.canParse(value)) return null;
  const u = new URL(value);
  return u.protocol === 'http:' && (u.hostname === 'localhost' || u.hostname === '127.0.0.1') && !u.username && !u.password ? u : null;
}

/**
 * A redirect URI as stored: parsed and serialised (host lowercased, default port
 * and dot segments gone), the form a browser follows and the consent page shows.
 */
const normalisedRedirectUri = (value: string): string => new URL(value).href;

/**
 * Whether `given` is one of a client's registered redirect URIs: equal to one as
 * given or once normalised (registered URIs are stored normalised; the normalised
 * form is where the browser goes either way), except for a public (native)
 * client's loopback URIs, where the port may differ (RFC 8252 7.3): a desktop app
 * or IDE listens on whatever port is free when the user signs in. Host, path and
 * query must still be the registered ones. A URI that is not literal (literalUri)
 * never matches, not even one stored before such URIs were refused.
 */
export function redirectUriRegistered(registered: readonly string[], given: string, publicClient: boolean): boolean {
  if (!literalUri(given) || !URL.canParse(given)) return false;
  if (registered.includes(given) || registered.includes(normalisedRedirectUri(given))) return true;
  const g = publicClient ? loopbackUri(given) : null;
  if (!g) return false;
  return registered.some((r) => {
    const u = loopbackUri(r);
    return u !== null && u.hostname === g.hostname && u.pathname === g.pathname && u.search === g.search;
  });
}

const redirectUri = z
  .string()
  .min(1)
  .max(2000)
  .refine(storableText, NUL)
  .refine(isAllowedRedirectUri, 'must be an https URI, or http on localhost or 127.0.0.1, without fragment, backslash or control character')
  .transform(normalisedRedirectUri);
const createOAuthClient = z.object({
  name,
  redirect_uris: z.array(redirectUri).min(1).max(20).transform(unique),
  scopes: z
    .array(z.string())
    .max(SCOPES.length * 4)
    .superRefine((xs, ctx) => {
      const bad = unknownScopes(xs);
      if (bad.length) ctx.addIssue({ code: 'custom', message: `unknown scopes: ${bad.join(', ')} (allowed: ${SCOPES.join(', ')})` });
    })
    .transform(unique),
});
/** The https URL of a client's metadata document, which is also its client_id (draft-ietf-oauth-client-id-metadata-document). */
const metadataUrl = z
  .string()
  .max(2000)
  .refine((v) => URL.canParse(v) && new URL(v).protocol === 'https:' && !v.includes('#'), 'must be an https URL without fragment');
/** A client's id: its UUID, or the https URL of its metadata document (a client id metadata document client). */
const clientId = z.string().max(2000);
const clientAuth = z.object({ client_id: clientId, client_secret: z.string().max(200), public: z.boolean().default(false) });
/** An RFC 8707 resource indicator: an absolute URL without fragment (the gateway checks it is the MCP function). */
const resource = z
  .string()
  .max(2000)
  .refine((v) => URL.canParse(v) && !v.includes('#'), 'must be an absolute URL without fragment');
const opaque = z.string().min(1).max(200);
const scopeList = z
  .array(z.string().max(50))
  .max(SCOPES.length * 4)
  .superRefine((xs, ctx) => {
    const bad = unknownScopes(xs);
    if (bad.length) ctx.addIssue({ code: 'custom', message: `unknown scopes: ${bad.join(', ')}` });
  });

/** A page of a management list: limit 1 to 200 (0, proto's unset, is the default 50), offset from 0. */
const DEFAULT_PAGE_LIMIT = 50;
const MAX_PAGE_LIMIT = 200;
const pageFields = z.object({ limit: z.number().int().min(0).max(MAX_PAGE_LIMIT), offset: z.number().int().min(0).max(1_000_000_000) });
const withDefaults = (p: { limit: number; offset: number } | undefined) => ({ limit: p?.limit || DEFAULT_PAGE_LIMIT, offset: p?.offset ?? 0 });
/** A page nested in a request (proto leaves an unset message undefined). */
const page = pageFields.optional().transform(withDefaults);

export const schemas = {
  page: pageFields.transform(withDefaults),
  orgPage: z.object({ org_id: uuid, page }),
  listDepartments: z.object({ org_id: uuid, page, department_ids: z.array(uuid).max(500).default([]) }),
  deleteDepartment: z.object({ org_id: uuid, department_id: uuid }),
  listUsers: z.object({ email: z.string().trim().min(1).max(320).refine(storableText, NUL).optional(), page }),
  listTokens: z
    .object({ kind: z.enum(['api_key', 'pat']), org_id: uuid.optional(), user_id: uuid.optional(), page })
    .refine((r) => (r.kind === 'api_key' ? r.org_id !== undefined : r.user_id !== undefined), 'api keys are listed by org_id, PATs by user_id'),
  resolveToken: z.object({
    token_hash: z.string().regex(/^[0-9a-f]{64}$/, 'must be a lowercase hex SHA-256'),
    org_id: uuid.optional(),
  }),
  createOrg: z.object({ name, modules: modules.default([]), rate_limit: rateLimit.optional() }),
  updateOrg: z.object({
    org_id: uuid,
    name: name.optional(),
    modules: z.object({ modules }).optional(),
    rate_limit: rateLimit.optional(),
  }),
  orgId: z.object({ org_id: uuid }),
  createDepartment: z.object({ org_id: uuid, name }),
  createUser: z.object({ email, name: name.optional(), password: password.optional() }),
  userId: z.object({ user_id: uuid }),
  putMember: z.object({ org_id: uuid, user_id: uuid, role: z.enum(ROLES), department_id: uuid.optional() }),
  member: z.object({ org_id: uuid, user_id: uuid }),
  listMembers: z.object({
    org_id: uuid,
    user_ids: z.array(uuid).max(1000).default([]).transform(unique),
    role: z.enum(ROLES).optional(),
  }),
  createApiKey: z.object({
    org_id: uuid,
    name,
    scopes,
    user_id: uuid.optional(),
    connector_id: uuid.optional(),
    device_ids: z.array(uuid).max(1000).default([]).transform(unique),
  }),
  createPat: z.object({ user_id: uuid, name, scopes, org_id: uuid.optional() }),
  tokenId: z.object({ token_id: uuid }),
  passwordGrant: z.object({ email: z.string().min(1).max(320).refine(storableText, NUL), password: z.string().min(1).max(1024) }),
  refreshGrant: z.object({ refresh_token: z.string().min(1).max(200) }),
  verifyPassword: z.object({ user_id: uuid, password: z.string().max(1024) }),
  createOAuthClient,
  registerPublicOAuthClient: createOAuthClient.extend({ metadata_url: metadataUrl.optional() }),
  oauthClientId: z.object({ client_id: clientId }),
  tokenHash: z.object({ token_hash: z.string().regex(/^[0-9a-f]{64}$/, 'must be a lowercase hex SHA-256') }),
  createOAuthCode: z.object({
    client_id: clientId,
    redirect_uri: z.string().max(2000),
    user_id: uuid,
    org_id: uuid,
    scopes: scopeList.transform(unique),
    code_challenge: z
      .string()
      .regex(/^[A-Za-z0-9._~-]{43,128}$/, 'must be 43 to 128 unreserved characters')
      .optional(),
    code_challenge_method: z.enum(['S256', 'plain']).optional(),
    resource: resource.optional(),
  }),
  exchangeOAuthCode: z.object({
    client: clientAuth,
    code: opaque,
    redirect_uri: z.string().max(2000),
    code_verifier: z.string().max(128).optional(),
    resource: resource.optional(),
  }),
  useOAuthForm: z.object({ form_id: z.string().min(16).max(100), expires_at: isoTimestamp() }),
  refreshOAuthToken: z.object({ client: clientAuth, refresh_token: opaque, scopes: scopeList.transform(unique), resource: resource.optional() }),
};

/** Parses a request or throws 400 validation_failed naming each bad field. */
export function parse<S extends z.ZodType>(schema: S, input: unknown): z.infer<S> {
  return parseWith(schema, input, 'invalid request');
}
