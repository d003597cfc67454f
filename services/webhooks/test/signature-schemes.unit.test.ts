import { randomBytes } from 'node:crypto';
import { Webhook } from 'standardwebhooks';
import { generateSecretFor, secretProblem, signatureHeaders, standardKey } from '../src/signature-schemes';
import { signatureHeader, verifySignature } from '../src/signature';

const secretOf = (bytes: number) => `whsec_${randomBytes(bytes).toString('base64')}`;
const body = Buffer.from('{"id":"0b7e5a8c-1f2d-4c3b-9a8e-7d6c5b4a3f21","event":"sample.created","data":{"name":"Ä"}}');
const id = '0b7e5a8c-1f2d-4c3b-9a8e-7d6c5b4a3f21';

const verifies = (secret: string, headers: Record<string, string>, payload: Buffer = body) => {
  try {
    new Webhook(secret).verify(payload, headers);
    return true;
  } catch {
    return false;
  }
};

describe('Standard Webhooks secrets', () => {
  it('are whsec_ and the standard base64 of 24 to 64 bytes', () => {
    for (const n of [24, 32, 64]) expect(standardKey(secretOf(n))).toHaveLength(n);
    for (const bad of [
      secretOf(23),
      secretOf(65),
      secretOf(32).slice('whsec_'.length), // no prefix
      secretOf(32).replace(/=+$/, ''), // unpadded
      `whsec_${randomBytes(33).toString('base64url').replace(/^./, '-')}`, // url-safe alphabet
      'whsec_ ' + randomBytes(32).toString('base64'),
      'a-secret-of-sixteen-plus',
    ]) {
      expect([bad, standardKey(bad)]).toEqual([bad, undefined]);
      expect(secretProblem('standard-webhooks', bad)).toMatch(/^must be whsec_/);
    }
    // the default scheme takes any secret the create body's rules let through
    expect(secretProblem('x-service-signature', 'a-secret-of-sixteen-plus')).toBeUndefined();
  });

  it('are generated in the form each scheme needs', () => {
    const standard = generateSecretFor('standard-webhooks');
    expect(standard).toMatch(/^whsec_[A-Za-z0-9+/]{43}=$/);
    expect(standardKey(standard)).toHaveLength(32);
    expect(generateSecretFor('x-service-signature')).toMatch(/^whsec_[A-Za-z0-9_-]{43}$/);
    expect(generateSecretFor('standard-webhooks')).not.toBe(standard);
  });
});

describe('signatureHeaders', () => {
  it('signs by Standard Webhooks: the reference library verifies, with each secret of a rotation', () => {
    const [current, previous] = [secretOf(32), secretOf(24)];
    const h = signatureHeaders({ scheme: 'standard-webhooks', id, secrets: [current, previous], body });
    expect(Object.keys(h)).toEqual(['webhook-id', 'webhook-timestamp', 'webhook-signature']);
    expect(h['webhook-id']).toBe(id);
    expect(h['webhook-signature']!.split(' ')).toHaveLength(2);
    expect(verifies(current, h)).toBe(true);
    expect(verifies(previous, h)).toBe(true);
    expect(verifies(secretOf(32), h)).toBe(false);
    expect(verifies(current, h, Buffer.concat([body, Buffer.from('\n')]))).toBe(false);
    expect(verifies(current, { ...h, 'webhook-id': `${id.slice(0, -1)}2` })).toBe(false);
    // the library's own signature of the same message is the one sent
    expect(h['webhook-signature']!.split(' ')[0]).toBe(new Webhook(current).sign(id, new Date(Number(h['webhook-timestamp']) * 1000), body));
  });

  it('leaves out a secret that is no Standard Webhooks key rather than sign with other bytes', () => {
    const current = secretOf(32);
    const h = signatureHeaders({ scheme: 'standard-webhooks', id, secrets: [current, 'an-old-secret-of-other-form'], body });
    expect(h['webhook-signature']!.split(' ')).toHaveLength(1);
    expect(verifies(current, h)).toBe(true);
  });

  it('is refused by the library beyond its 5 minutes either way', () => {
    const secret = secretOf(32);
    const now = Math.floor(Date.now() / 1000);
    expect(verifies(secret, signatureHeaders({ scheme: 'standard-webhooks', id, secrets: [secret], body, nowSeconds: now - 400 }))).toBe(false);
    expect(verifies(secret, signatureHeaders({ scheme: 'standard-webhooks', id, secrets: [secret], body, nowSeconds: now + 400 }))).toBe(false);
  });

  it('signs by the default scheme exactly as before', () => {
    const secrets = ['a-secret-of-sixteen-plus', secretOf(32)];
    const h = signatureHeaders({ scheme: 'x-service-signature', id, secrets, body, nowSeconds: 1_795_689_600 });
    expect(h).toEqual({ 'X-Service-Signature': signatureHeader(secrets, body, 1_795_689_600) });
    for (const secret of secrets) {
      expect(() => verifySignature({ secret, body, signature: h['X-Service-Signature'], timestamp: undefined, nowSeconds: 1_795_689_600 })).not.toThrow();
    }
  });
});
