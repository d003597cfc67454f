import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';

/** The state key, derived from the internal secret so every gateway replica shares it. */
export const oauthStateKey = (internalSecret: string): Buffer => createHmac('sha256', internalSecret).update('lab.functions.oauth-authorize.state').digest();

/**
 * The authorization page keeps no server-side session: each step hands the
 * browser the state of the authorization request (client, redirect, scopes,
 * state, and once signed in the user) as an HMAC-signed, short-lived blob in a
 * hidden field. The CSRF token is derived from that blob's nonce and travels
 * twice, in a hidden field and in an HttpOnly SameSite=Strict cookie; a POST
 * must bring both, equal, and matching its state.
 */
export interface AuthorizeRequest {
  client_id: string;
  redirect_uri: string;
  /** requested scopes; empty means the client's registered scopes */
  scopes: string[];
  state?: string;
  code_challenge?: string;
  code_challenge_method?: 'S256' | 'plain';
  /** RFC 8707 resource (identity provider flow only) */
  resource?: string;
  /**
   * 'idp' for the identity provider's authorization endpoint; absent for the
   * spec's oauth-authorize. A state is accepted only where it was sealed.
   */
  flow?: 'idp';
}

export interface AuthorizeState extends AuthorizeRequest {
  /** set once the user has signed in */
  user_id?: string;
  nonce: string;
  /** expiry, seconds since the epoch */
  exp: number;
}

/** How long a login or consent page stays usable. */
export const STATE_TTL_SECONDS = 600;

export const CSRF_COOKIE = 'lab_oauth_csrf';

const mac = (key: Buffer, label: string, data: string) => createHmac('sha256', key).update(`${label}\n${data}`).digest('base64url');

function sameText(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}

export class StateSigner {
  constructor(private readonly key: Buffer) {}

  /** A fresh state for `req` (and the signed-in user, if any): a new nonce, so a new CSRF token. */
  seal(req: AuthorizeRequest, userId?: string, now = Date.now()): { state: string; csrf: string } {
    const s: AuthorizeState = {
      ...req,
      ...(userId ? { user_id: userId } : {}),
      nonce: randomBytes(16).toString('base64url'),
      exp: Math.floor(now / 1000) + STATE_TTL_SECONDS,
    };
    const body = Buffer.from(JSON.stringify(s)).toString('base64url');
    return { state: `${body}.${mac(this.key, 'state', body)}`, csrf: this.csrfOf(s.nonce) };
  }

  /** The state if it is authentic and unexpired, else null. */
  open(sealed: unknown, now = Date.now()): AuthorizeState | null {
    if (typeof sealed !== 'string' || sealed.length > 8192) return null;
    const [body, sig, extra] = sealed.split('.');
    if (!body || !sig || extra !== undefined || !sameText(sig, mac(this.key, 'state', body))) return null;
    let s: AuthorizeState;
    try {
      s = JSON.parse(Buffer.from(body, 'base64url').toString('utf8')) as AuthorizeState;
    } catch {
      return null;
    }
    return typeof s.exp === 'number' && s.exp * 1000 > now && typeof s.nonce === 'string' ? s : null;
  }

  /** True when the form's token and the cookie's are both the one bound to this state. */
  csrfValid(s: AuthorizeState, fromForm: unknown, fromCookie: string | undefined): boolean {
    if (typeof fromForm !== 'string' || fromCookie === undefined) return false;
    const expected = this.csrfOf(s.nonce);
    return sameText(fromForm, expected) && sameText(fromCookie, expected);
  }

  private csrfOf(nonce: string): string {
    return mac(this.key, 'csrf', nonce);
  }
}

/** One cookie value of a Cookie header (no parser dependency for one cookie). */
export function cookieOf(header: string | undefined, name: string): string | undefined {
  if (!header) return undefined;
  for (const part of header.split(';')) {
    const i = part.indexOf('=');
    if (i > 0 && part.slice(0, i).trim() === name) return part.slice(i + 1).trim();
  }
  return undefined;
}
