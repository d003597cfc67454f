import type { Reply } from '@lab/http-api';
import { CSRF_COOKIE, STATE_TTL_SECONDS } from './signed-state.js';

/**
 * The server-rendered pages of oauth-authorize and of the identity provider's
 * authorization endpoint (the same pages, posting back to their own path). Every interpolated value goes
 * through esc(); the pages load nothing (no script, no external style), may not
 * be framed (clickjacking on a consent button) and are never cached.
 */
const ESCAPES: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };
export const esc = (s: string): string => s.replace(/[&<>"']/g, (c) => ESCAPES[c]!);

export const PAGE_HEADERS: Record<string, string> = {
  'Cache-Control': 'no-store',
  Pragma: 'no-cache',
  // No form-action: after consent the browser follows a redirect to the client.
  'Content-Security-Policy': "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'; base-uri 'none'",
  'X-Frame-Options': 'DENY',
  'Referrer-Policy': 'no-referrer',
};

const STYLE =
  'body{font-family:system-ui,sans-serif;max-width:32rem;margin:3rem auto;padding:0 1rem}label{display:block;margin:.8rem 0}' +
  'input[type=email],input[type=password],select{width:100%;padding:.4rem}button{margin:.8rem .5rem 0 0;padding:.5rem 1rem}.err{color:#a00}';

function page(status: number, title: string, body: string, csrf?: { token: string; secure: boolean; path: string }): Reply {
  const headers = { ...PAGE_HEADERS };
  if (csrf) {
    headers['Set-Cookie'] =
      `${CSRF_COOKIE}=${csrf.token}; Path=${csrf.path}; Max-Age=${STATE_TTL_SECONDS}; HttpOnly; SameSite=Strict${csrf.secure ? '; Secure' : ''}`;
  }
  return {
    status,
    contentType: 'text/html; charset=utf-8',
    headers,
    body: `<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width"><title>${esc(title)}</title><style>${STYLE}</style></head><body><h1>${esc(title)}</h1>${body}</body></html>`,
  };
}

const hidden = (name: string, value: string) => `<input type="hidden" name="${esc(name)}" value="${esc(value)}">`;

export interface FormSecrets {
  state: string;
  csrf: string;
  secure: boolean;
  /** the authorization endpoint's path: the form posts there and the CSRF cookie is scoped to it */
  action: string;
}

const formCookie = (f: FormSecrets) => ({ token: f.csrf, secure: f.secure, path: f.action });

export function loginPage(clientName: string, f: FormSecrets, error?: string): Reply {
  return page(
    error ? 401 : 200,
    'Sign in',
    `<p><strong>${esc(clientName)}</strong> asks to access the lab notebook on your behalf. Sign in to continue.</p>` +
      (error ? `<p class="err">${esc(error)}</p>` : '') +
      `<form method="post" action="${esc(f.action)}">${hidden('step', 'login')}${hidden('auth_state', f.state)}${hidden('csrf_token', f.csrf)}` +
      '<label>Email <input type="email" name="email" autocomplete="username" required maxlength="320"></label>' +
      '<label>Password <input type="password" name="password" autocomplete="current-password" required maxlength="1024"></label>' +
      '<button type="submit">Sign in</button></form>',
    formCookie(f),
  );
}

export interface OrgChoice {
  org_id: string;
  name: string;
  role: string;
}

/**
 * Where a self-registered client sends the user back: the host on its own, as the
 * browser will read it (parsed: lowercased, an IDN in its ASCII form), then the
 * whole URI as parsed. A long path or query cannot push the host out of sight.
 */
function returnTarget(redirectUri: string): string {
  const u = new URL(redirectUri);
  return `<strong>${esc(u.host)}</strong> (<code>${esc(u.href)}</code>)`;
}

/**
 * The consent page. A self-registered (public) client chose its own name, so the
 * page says so and names where it will send the user back: a name proves nothing.
 */
export function consentPage(
  clientName: string,
  scopes: string[],
  orgs: OrgChoice[],
  f: FormSecrets,
  selfRegistered?: { redirectUri: string; documentUrl?: string },
): Reply {
  const options = orgs.map((o) => `<option value="${esc(o.org_id)}">${esc(o.name)} (${esc(o.role)})</option>`).join('');
  const scopeList = scopes.map((s) => `<li><code>${esc(s)}</code></li>`).join('');
  // a document client is vouched for by the host serving its document; its name, like a registered one's, by nobody
  const who = selfRegistered?.documentUrl
    ? `This application is described by its own document at <strong>${esc(new URL(selfRegistered.documentUrl).host)}</strong> (${esc(selfRegistered.documentUrl)}); its name is not verified.`
    : 'This application registered itself; its name is not verified.';
  const notice = selfRegistered
    ? `<p>${who} It will receive access at ${returnTarget(selfRegistered.redirectUri)}. Allow only if you are connecting it yourself.</p>`
    : '';
  return page(
    200,
    'Authorize access',
    `<p><strong>${esc(clientName)}</strong> asks for:</p><ul>${scopeList}</ul>${notice}` +
      '<p>admin, audit:read and * are granted only where you are an administrator.</p>' +
      `<form method="post" action="${esc(f.action)}">${hidden('step', 'consent')}${hidden('auth_state', f.state)}${hidden('csrf_token', f.csrf)}` +
      `<label>Organisation <select name="org_id" required>${options}</select></label>` +
      '<button type="submit" name="decision" value="allow">Allow</button><button type="submit" name="decision" value="deny">Deny</button></form>',
    formCookie(f),
  );
}

/** Where no redirect may be made (unknown client, unregistered redirect_uri, broken form): a plain page. */
export function errorPage(status: number, error: string, description: string): Reply {
  return page(status, 'Authorization failed', `<p><code>${esc(error)}</code></p><p>${esc(description)}</p>`);
}
