import type { Reply } from '@lab/http-api';
import { isAllowedRedirectUri } from '@lab/identity';
import { MCP_SCOPES } from './metadata.js';
import { tokenError } from './oauth.js';

/**
 * The client metadata (RFC 7591 section 2) a public MCP client may give, by
 * registering it or in its client ID metadata document: the same rules for
 * both, since both end as the same kind of client.
 */
const MAX_METADATA_BYTES = 16 * 1024;
const MAX_REDIRECT_URIS = 10;
const MAX_NAME = 200;
export const GRANT_TYPES = ['authorization_code', 'refresh_token'];

export const metadataError = (error: MetadataRefusal['error'], description: string): Reply => tokenError(400, error, description);

export type MetadataRefusal = { error: 'invalid_client_metadata' | 'invalid_redirect_uri'; description: string };
export type Registration = { name: string; redirect_uris: string[]; scopes: string[] } | MetadataRefusal;

const stringList = (v: unknown): v is string[] => Array.isArray(v) && v.every((x) => typeof x === 'string');

/**
 * The client metadata of RFC 7591 section 2 that matter here; others (logo_uri,
 * client_uri, contacts, software_id...) are ignored, as section 3.1 allows. Only
 * what this server can honour is accepted: no secret, the code flow, the MCP scopes.
 */
export function registration(body: unknown): Registration {
  if (!body || typeof body !== 'object' || Array.isArray(body))
    return { error: 'invalid_client_metadata', description: 'send the client metadata as a JSON object' };
  if (Buffer.byteLength(JSON.stringify(body)) > MAX_METADATA_BYTES)
    return { error: 'invalid_client_metadata', description: `client metadata is limited to ${MAX_METADATA_BYTES} bytes` };
  const m = body as Record<string, unknown>;
  const uris = m.redirect_uris;
  if (!stringList(uris) || uris.length < 1 || uris.length > MAX_REDIRECT_URIS) {
    return { error: 'invalid_redirect_uri', description: `redirect_uris must list 1 to ${MAX_REDIRECT_URIS} URIs` };
  }
  // https, or http on the loopback host (RFC 8252 7.3); custom schemes are refused: any app may claim one.
  // No backslash or control character: the URI must read as the host it sends the browser to.
  const bad = uris.filter((u) => u.length > 2000 || !isAllowedRedirectUri(u));
  if (bad.length) {
    return {
      error: 'invalid_redirect_uri',
      description: 'redirect URIs must be https, or http on localhost or 127.0.0.1, without fragment, backslash or control character',
    };
  }
  const auth = m.token_endpoint_auth_method;
  if (auth !== undefined && auth !== 'none')
    return { error: 'invalid_client_metadata', description: 'only public clients are served here: token_endpoint_auth_method must be none' };
  if (m.grant_types !== undefined && (!stringList(m.grant_types) || m.grant_types.some((g) => !GRANT_TYPES.includes(g)))) {
    return { error: 'invalid_client_metadata', description: `grant_types may hold ${GRANT_TYPES.join(' and ')}` };
  }
  if (m.response_types !== undefined && (!stringList(m.response_types) || m.response_types.some((r) => r !== 'code'))) {
    return { error: 'invalid_client_metadata', description: 'response_types may hold only code' };
  }
  if (m.scope !== undefined && typeof m.scope !== 'string') return { error: 'invalid_client_metadata', description: 'scope is a space-separated string' };
  const scopes = [...new Set((m.scope ?? '').split(' ').filter((s) => s.length > 0))];
  const beyond = scopes.filter((s) => !MCP_SCOPES.includes(s));
  if (beyond.length) return { error: 'invalid_client_metadata', description: `MCP clients may ask for: ${MCP_SCOPES.join(' ')}` };
  const name = m.client_name;
  if (name !== undefined && (typeof name !== 'string' || name.trim().length === 0 || name.length > MAX_NAME)) {
    return { error: 'invalid_client_metadata', description: `client_name is 1 to ${MAX_NAME} characters` };
  }
  return { name: typeof name === 'string' ? name.trim() : 'MCP client', redirect_uris: uris, scopes: scopes.length ? scopes : [...MCP_SCOPES] };
}
