/** Drives the OAuth authorization-code flow of the functions base over HTTP, as a browser and a client would. */
export interface FlowUser {
  email: string;
  password: string;
}

export interface AuthorizeParams {
  client_id: string;
  redirect_uri: string;
  scope?: string;
  state?: string;
  response_type?: string;
  [k: string]: string | undefined;
}

export interface Page {
  status: number;
  headers: Headers;
  html: string;
  location: string | null;
}

export const FN = '/functions/v1';

async function fetchPage(url: string, init: RequestInit): Promise<Page> {
  const res = await fetch(url, { ...init, redirect: 'manual' });
  return { status: res.status, headers: res.headers, html: await res.text(), location: res.headers.get('location') };
}

function authorizeQuery(p: AuthorizeParams): string {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries({ response_type: 'code', ...p })) if (v !== undefined) q.set(k, v);
  return q.toString();
}

export const getAuthorize = (base: string, p: AuthorizeParams, headers: Record<string, string> = {}) =>
  fetchPage(`${base}${FN}/oauth-authorize?${authorizeQuery(p)}`, { headers });

/** The hidden fields and the CSRF cookie of a rendered form. */
export function formOf(page: Page): { auth_state: string; csrf_token: string; cookie: string } {
  const field = (name: string) => new RegExp(`name="${name}" value="([^"]*)"`).exec(page.html)?.[1];
  const cookie = page.headers.get('set-cookie')?.split(';')[0];
  const auth_state = field('auth_state');
  const csrf_token = field('csrf_token');
  if (!auth_state || !csrf_token || !cookie) throw new Error(`no form in page ${page.status}: ${page.html.slice(0, 300)}`);
  return { auth_state, csrf_token, cookie };
}

export const postForm = (base: string, fields: Record<string, string>, cookie?: string, headers: Record<string, string> = {}) =>
  fetchPage(`${base}${FN}/oauth-authorize`, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded', ...(cookie ? { cookie } : {}), ...headers },
    body: new URLSearchParams(fields).toString(),
  });

/** Login page -> sign in -> consent page; returns the consent page. */
export async function signIn(base: string, p: AuthorizeParams, user: FlowUser): Promise<Page> {
  const login = await getAuthorize(base, p);
  if (login.status !== 200) throw new Error(`login page answered ${login.status}: ${login.html.slice(0, 300)}`);
  const f = formOf(login);
  return postForm(base, { step: 'login', auth_state: f.auth_state, csrf_token: f.csrf_token, email: user.email, password: user.password }, f.cookie);
}

/** Consent for one organisation; returns the redirect answer. */
export async function consent(base: string, consentPage: Page, orgId: string, decision = 'allow'): Promise<Page> {
  const f = formOf(consentPage);
  return postForm(base, { step: 'consent', auth_state: f.auth_state, csrf_token: f.csrf_token, org_id: orgId, decision }, f.cookie);
}

/** The whole browser part: returns the parsed redirect Location. */
export async function authorize(base: string, p: AuthorizeParams, user: FlowUser, orgId: string): Promise<URL> {
  const page = await signIn(base, p, user);
  if (page.status !== 200) throw new Error(`consent page answered ${page.status}: ${page.html.slice(0, 300)}`);
  const done = await consent(base, page, orgId);
  if (done.status !== 302 || !done.location) throw new Error(`consent answered ${done.status}`);
  return new URL(done.location);
}

export interface TokenAnswer {
  status: number;
  headers: Headers;
  body: any;
}

/** POST oauth-token with client_secret_basic (default) or client_secret_post. */
export async function token(
  base: string,
  client: { client_id: string; client_secret: string },
  fields: Record<string, string>,
  auth: 'basic' | 'post' | 'json' = 'basic',
): Promise<TokenAnswer> {
  const headers: Record<string, string> = {};
  let body: string;
  if (auth === 'basic') {
    headers.authorization = `Basic ${Buffer.from(`${encodeURIComponent(client.client_id)}:${encodeURIComponent(client.client_secret)}`).toString('base64')}`;
  }
  const all = auth === 'basic' ? fields : { ...fields, ...client };
  if (auth === 'json') {
    headers['content-type'] = 'application/json';
    body = JSON.stringify(all);
  } else {
    headers['content-type'] = 'application/x-www-form-urlencoded';
    body = new URLSearchParams(all).toString();
  }
  const res = await fetch(`${base}${FN}/oauth-token`, { method: 'POST', headers, body });
  const text = await res.text();
  return { status: res.status, headers: res.headers, body: text ? JSON.parse(text) : undefined };
}

/** The form's action attribute, as a browser reads it. */
function actionOf(page: Page): string {
  const action = /<form method="post" action="([^"]*)"/.exec(page.html)?.[1];
  if (!action) throw new Error(`no form action in page ${page.status}: ${page.html.slice(0, 300)}`);
  return action.replace(/&amp;/g, '&');
}

/** Submits a rendered form to its action (relative to `pageUrl`) with its hidden fields and CSRF cookie. */
async function submit(page: Page, pageUrl: URL, fields: Record<string, string>): Promise<Page> {
  const f = formOf(page);
  return fetchPage(new URL(actionOf(page), pageUrl).toString(), {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded', cookie: f.cookie },
    body: new URLSearchParams({ auth_state: f.auth_state, csrf_token: f.csrf_token, ...fields }).toString(),
  });
}

/**
 * What a browser does at any authorization URL: opens it, signs in, chooses the
 * organisation and allows. Returns the page that ends the flow (a 302 to the
 * client, or an error page).
 */
export async function browserAuthorize(url: URL, user: FlowUser, orgId: string, onConsent?: (page: Page) => void): Promise<Page> {
  const login = await fetchPage(url.toString(), {});
  if (login.status !== 200) return login;
  const consentPage = await submit(login, url, { step: 'login', email: user.email, password: user.password });
  if (consentPage.status !== 200) return consentPage;
  onConsent?.(consentPage);
  return submit(consentPage, url, { step: 'consent', org_id: orgId, decision: 'allow' });
}
