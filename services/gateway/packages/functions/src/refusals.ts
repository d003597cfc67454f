import { bodyText, errorReply, type Reply, type Route } from '@lab/http-api';
import { tokenError } from './oauth.js';
import { errorPage } from './views.js';

/** How an endpoint's errors read: the API's envelope, RFC 6749 5.2 JSON, or an HTML page. */
type ErrorLanguage = 'envelope' | 'oauth_json' | 'oauth_page';

function languageOf(route: Route | undefined): ErrorLanguage {
  const h = route?.handler;
  if (!h) return 'envelope';
  if (h.kind === 'oauth_token' || (h.kind === 'idp_oauth' && h.op !== 'authorize')) return 'oauth_json';
  if (h.kind === 'oauth_authorize' || h.kind === 'idp_oauth') return 'oauth_page';
  return 'envelope';
}

/** RFC 6749 5.2 has no code for most refusals: invalid_request for the client's, server_error or temporarily_unavailable for ours. */
const oauthCode = (status: number): string => (status === 503 ? 'temporarily_unavailable' : status >= 500 ? 'server_error' : 'invalid_request');

/**
 * The answer to an error on a route, in the route's own error language. The
 * OAuth endpoints answer their own errors themselves; what reaches here is what
 * the gateway refused before the endpoint ran (a body that is not valid or too
 * large, a query PostgreSQL cannot store) or an unexpected failure inside it.
 * An OAuth client library reads `error` as a string, and a browser on the
 * authorization page gets a page: the envelope would break both.
 */
export function errorReplyOn(route: Route | undefined, err: unknown): Reply {
  const reply = errorReply(err);
  const language = languageOf(route);
  if (language === 'envelope') return reply;
  const envelope = JSON.parse(bodyText(reply) ?? '{}') as { error?: { message?: string; details?: { error_id?: string } } };
  const errorId = envelope.error?.details?.error_id;
  const description = `${envelope.error?.message ?? 'refused'}${errorId ? ` (error id ${errorId})` : ''}`;
  const own =
    language === 'oauth_json' ? tokenError(reply.status, oauthCode(reply.status), description) : errorPage(reply.status, oauthCode(reply.status), description);
  return { ...own, headers: { ...own.headers, ...reply.headers }, cause: reply.cause };
}
