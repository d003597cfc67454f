import type { LookupAddress } from 'node:dns';
import { DomainError } from '@lab/kit';
import { assertPublicReceiver } from '../src/receiver-guard';

// names resolved by a table: no DNS in a unit test
const table: Record<string, LookupAddress[]> = {
  'hooks.example.com': [{ address: '93.184.216.34', family: 4 }],
  'internal.example.com': [{ address: '10.1.2.3', family: 4 }],
  'rebind.example.com': [{ address: '169.254.169.254', family: 4 }],
  // as the kit's resolver answers it (RFC 6761)
  localhost: [{ address: '127.0.0.1', family: 4 }],
};
const resolver = async (host: string) => {
  const found = table[host];
  if (!found) throw Object.assign(new Error(`${host} not found`), { code: 'ENOTFOUND' });
  return found;
};
const refusal = (url: string, allowPrivate = false) =>
  assertPublicReceiver(url, allowPrivate, resolver).then(
    () => undefined,
    (e: DomainError) => [e.code, (e.details?.fields as { path: string }[])[0]!.path],
  );

describe('assertPublicReceiver', () => {
  it.each([
    'http://127.0.0.1:8080/hook',
    'http://localhost/hook',
    'http://[::1]/hook',
    'http://169.254.169.254/latest/meta-data',
    'https://10.0.0.5/hook',
    'http://192.168.1.10/hook',
    'http://[::ffff:127.0.0.1]/hook',
    'https://internal.example.com/hook',
    'https://rebind.example.com/hook',
  ])('refuses %s with 400 naming url', async (url) => {
    expect(await refusal(url)).toEqual(['validation_failed', 'url']);
  });

  it.each(['https://hooks.example.com/in', 'https://93.184.216.34/in', 'https://not-yet-registered.example.com/in'])('takes %s', async (url) => {
    expect(await refusal(url)).toBeUndefined();
  });

  it('takes private receivers when private networks are allowed', async () => {
    expect(await refusal('http://127.0.0.1:8080/hook', true)).toBeUndefined();
  });
});
