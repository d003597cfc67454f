import { randomBytes } from 'node:crypto';
import { cookieOf, STATE_TTL_SECONDS, StateSigner } from '../src/signed-state';
import { esc } from '../src/views';

const signer = new StateSigner(randomBytes(32));
const req = { client_id: 'c', redirect_uri: 'https://x.test/cb', scopes: ['read'], state: 's' };

describe('signed authorization state', () => {
  it('opens what it sealed, with a CSRF token bound to it', () => {
    const { state, csrf } = signer.seal(req, 'user-1');
    const s = signer.open(state)!;
    expect(s).toMatchObject({ ...req, user_id: 'user-1' });
    expect(signer.csrfValid(s, csrf, csrf)).toBe(true);
  });

  it('refuses a tampered, foreign or expired state', () => {
    const { state } = signer.seal(req);
    const [body, sig] = state.split('.');
    const forged = Buffer.from(JSON.stringify({ ...JSON.parse(Buffer.from(body!, 'base64url').toString()), user_id: 'evil' })).toString('base64url');
    expect(signer.open(`${forged}.${sig}`)).toBeNull();
    expect(new StateSigner(randomBytes(32)).open(state)).toBeNull();
    expect(signer.open(state, Date.now() + (STATE_TTL_SECONDS + 1) * 1000)).toBeNull();
    expect(signer.open(undefined)).toBeNull();
  });

  it('needs the same CSRF token in the form and the cookie, and the one of this state', () => {
    const a = signer.seal(req);
    const b = signer.seal(req);
    const s = signer.open(a.state)!;
    expect(signer.csrfValid(s, a.csrf, undefined)).toBe(false);
    expect(signer.csrfValid(s, a.csrf, b.csrf)).toBe(false);
    expect(signer.csrfValid(s, b.csrf, b.csrf)).toBe(false);
  });

  it('reads one cookie and escapes HTML', () => {
    expect(cookieOf('a=1; lab_oauth_csrf=xyz; b=2', 'lab_oauth_csrf')).toBe('xyz');
    expect(cookieOf(undefined, 'x')).toBeUndefined();
    expect(esc(`<a href="x">'&'</a>`)).toBe('&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;');
  });
});
