import { createHmac } from 'node:crypto';
import { BlockedAddressError, DomainError, isBlockedAddress, resolveAllowed, type ServiceDeps } from '@lab/kit';
import { jsonProblem, MAX_JSON_DEPTH, storableTimestamp } from '@lab/kit';
import { receiveInbound } from '../src/inbound';
import { createSubscriptionBody } from '../src/management';
import { filterMatches, isValidFilter } from '../src/event-filters';
import { parseSignatureHeader, signatureHeader, verifySignature } from '../src/signature';
import { retryDelay, webhooksConfig } from '../src/config';

const secret = 'whsec_test_secret_0123456789';
const body = Buffer.from('{"event_type":"x","payload":{}}');
const now = 1_800_000_000;
const hex = (t: number | string, s = secret) => createHmac('sha256', s).update(`${t}.`).update(body).digest('hex');

function verdict(signature: string | undefined, timestamp?: string, nowSeconds = now): string {
  try {
    verifySignature({ secret, body, signature, timestamp, nowSeconds });
    return 'ok';
  } catch (err) {
    const e = err as DomainError;
    return `${e.kind}:${e.code}`;
  }
}

describe('signature scheme', () => {
  test('a header made by signatureHeader verifies over the same bytes only', () => {
    const h = signatureHeader(secret, body, now);
    expect(h).toBe(`t=${now},v1=${hex(now)}`);
    expect(verdict(h)).toBe('ok');
    expect(() => verifySignature({ secret, body: Buffer.from(body.toString() + ' '), signature: h, timestamp: undefined, nowSeconds: now })).toThrow(
      'signature does not match',
    );
  });

  test('header parsing: parts trimmed, one digits-only t, at least one 64-hex v1', () => {
    expect(parseSignatureHeader(` t=${now} ,  v1=${hex(now).toUpperCase()} `)).toEqual({ t: String(now), v1: [hex(now)] });
    expect(verdict(`v1=${hex(now)}`)).toBe('invalid:invalid_signature_header');
    expect(verdict(`t=${now},t=${now},v1=${hex(now)}`)).toBe('invalid:invalid_signature_header');
    expect(verdict(`t=${now}a,v1=${hex(now)}`)).toBe('invalid:invalid_signature_header');
    expect(verdict(`t=-${now},v1=${hex(now)}`)).toBe('invalid:invalid_signature_header');
    expect(verdict(`t=${now}`)).toBe('invalid:invalid_signature_header');
    expect(verdict(`t=${now},v1=${hex(now).slice(2)}`)).toBe('invalid:invalid_signature_header');
    expect(verdict(`t=${now},v1=${'g'.repeat(64)}`)).toBe('invalid:invalid_signature_header');
    expect(verdict(undefined)).toBe('unauthenticated:invalid_signature');
  });

  test('rotation: any of two v1 values may match; none matching is 401', () => {
    expect(verdict(`t=${now},v1=${hex(now, 'old-secret-xxxxxxxx')},v1=${hex(now)}`)).toBe('ok');
    expect(verdict(`t=${now},v1=${hex(now)},v1=${hex(now, 'old-secret-xxxxxxxx')}`)).toBe('ok');
    expect(verdict(`t=${now},v1=${hex(now, 'a')},v1=${hex(now, 'b')}`)).toBe('unauthenticated:invalid_signature');
  });

  test('during a rotation: one v1 per secret, the new one first; either secret verifies, a third does not', () => {
    const old = 'whsec_the_replaced_secret_000';
    const h = signatureHeader([secret, old], body, now);
    expect(h).toBe(`t=${now},v1=${hex(now)},v1=${hex(now, old)}`);
    // a receiver that knows only one of the two accepts the delivery
    expect(verdict(h)).toBe('ok');
    expect(() => verifySignature({ secret: old, body, signature: h, timestamp: undefined, nowSeconds: now })).not.toThrow();
    expect(() => verifySignature({ secret: 'whsec_a_third_secret_00000000', body, signature: h, timestamp: undefined, nowSeconds: now })).toThrow(
      'signature does not match',
    );
    // the inbound side: an endpoint in its overlap accepts a request signed by either secret
    for (const signer of [secret, old]) {
      expect(() =>
        verifySignature({ secret: [secret, old], body, signature: signatureHeader(signer, body, now), timestamp: undefined, nowSeconds: now }),
      ).not.toThrow();
    }
    expect(() =>
      verifySignature({
        secret: [secret, old],
        body,
        signature: signatureHeader('whsec_a_third_secret_00000000', body, now),
        timestamp: undefined,
        nowSeconds: now,
      }),
    ).toThrow('signature does not match');
  });

  test('300 second tolerance both ways', () => {
    expect(verdict(`t=${now - 300},v1=${hex(now - 300)}`)).toBe('ok');
    expect(verdict(`t=${now - 301},v1=${hex(now - 301)}`)).toBe('unauthenticated:invalid_signature');
    expect(verdict(`t=${now + 301},v1=${hex(now + 301)}`)).toBe('unauthenticated:invalid_signature');
  });

  test('X-Service-Timestamp must equal t when present', () => {
    const h = `t=${now},v1=${hex(now)}`;
    expect(verdict(h, String(now))).toBe('ok');
    expect(verdict(h, String(now - 1))).toBe('unauthenticated:invalid_signature');
    expect(verdict(h, 'soon')).toBe('invalid:invalid_signature_header');
  });
});

describe('event filters', () => {
  test('wildcards are prefix matches on the first segment', () => {
    expect(filterMatches('equipment.*', 'equipment.usage.started')).toBe(true);
    expect(filterMatches('equipment.*', 'experiment.created')).toBe(false);
    expect(filterMatches('sample.*', 'sample.status_changed')).toBe(true);
    expect(filterMatches('*', 'stock_movement.created')).toBe(true);
    expect(filterMatches('experiment.created', 'experiment.created')).toBe(true);
    expect(filterMatches('experiment.created', 'experiment.signed')).toBe(false);
  });

  test('audit records and identity notices never match, even *', () => {
    expect(filterMatches('*', 'audit.record')).toBe(false);
    expect(filterMatches('*', 'identity.token.revoked')).toBe(false);
  });

  test('valid filters', () => {
    for (const f of ['*', 'experiment.*', 'sample.*', 'stock_movement.*', 'equipment.*', 'equipment.usage.started', 'stock_item.*', 'environmental.*'])
      expect(isValidFilter(f)).toBe(true);
    for (const f of ['audit.record', 'identity.*', 'experiment', 'experiment.**', '', 'sample.*.x']) expect(isValidFilter(f)).toBe(false);
  });
});

describe('SSRF guard', () => {
  test('refuses internal ranges, allows global unicast', () => {
    for (const a of [
      '127.0.0.1',
      '10.0.0.1',
      '172.16.0.1',
      '192.168.1.1',
      '169.254.169.254',
      '100.64.0.1',
      '0.0.0.0',
      '255.255.255.255',
      '224.0.0.1',
      '::1',
      '::',
      'fe80::1',
      'fc00::1',
      'fd12::1',
      '::ffff:127.0.0.1',
      '::ffff:10.0.0.1',
      'ff02::1',
    ]) {
      expect([a, isBlockedAddress(a)]).toEqual([a, true]);
    }
    for (const a of ['8.8.8.8', '1.1.1.1', '2001:4860:4860::8888']) expect([a, isBlockedAddress(a)]).toEqual([a, false]);
  });

  test('literal hosts and names resolving to loopback are refused unless allowed', async () => {
    for (const host of ['127.0.0.1', '10.0.0.1', '169.254.169.254', '[::1]', 'localhost']) {
      await expect(resolveAllowed(host, false)).rejects.toBeInstanceOf(BlockedAddressError);
    }
    await expect(resolveAllowed('localhost', true)).resolves.toMatchObject({ address: expect.any(String) });
    await expect(resolveAllowed('[::1]', true)).resolves.toEqual({ address: '::1', family: 6 });
  });

  test('a name with one internal and one public answer connects to the public one', async () => {
    const resolver = async () => [
      { address: '10.1.2.3', family: 4 },
      { address: '93.184.216.34', family: 4 },
    ];
    await expect(resolveAllowed('mixed.example', false, resolver)).resolves.toEqual({ address: '93.184.216.34', family: 4 });
    await expect(resolveAllowed('internal.example', false, async () => [{ address: '::ffff:169.254.169.254', family: 6 }])).rejects.toBeInstanceOf(
      BlockedAddressError,
    );
  });
});

describe('configuration', () => {
  test('defaults: 5 attempts, 10 s .. 10 min backoff with jitter, private networks blocked', () => {
    const cfg = webhooksConfig({}, {});
    expect(cfg.allowPrivateNetworks).toBe(false);
    expect(cfg.maxAttempts).toBe(5);
    expect(cfg.retryDelaysMs).toEqual([10_000, 30_000, 120_000, 600_000]);
    const d = retryDelay(cfg, 1);
    expect(d).toBeGreaterThanOrEqual(8_000);
    expect(d).toBeLessThanOrEqual(12_000);
  });

  test('environment overrides', () => {
    const cfg = webhooksConfig({}, { LAB_WEBHOOKS_ALLOW_PRIVATE_NETWORKS: 'true', LAB_WEBHOOKS_RETRY_DELAYS_MS: '5,6' });
    expect(cfg.allowPrivateNetworks).toBe(true);
    expect(cfg.retryDelaysMs).toEqual([5, 6]);
  });
});

describe('inbound bodies PostgreSQL cannot store', () => {
  const ORG = '0190a0c8-0000-7000-8000-00000000000a';
  const endpoint = { id: '0190a0c8-0000-7000-8000-00000000000e', org_id: ORG, secret, allowed_event_types: [], job_type: null };
  const caller = { org_id: null, user_id: null, role: null, department_id: null, scopes: [], token_kind: 'system', token_id: null, request_id: 'r' };
  // the endpoint lookup answers; storing answers a marker, so a refused body shows by not reaching it
  const deps = { db: { rows: async () => [endpoint] }, outbox: { write: async () => ({ event_id: 'stored', duplicate: false }) } } as unknown as ServiceDeps;
  const receive = (raw: string) => {
    const t = Math.floor(Date.now() / 1000);
    const v1 = createHmac('sha256', secret).update(`${t}.${raw}`).digest('hex');
    return receiveInbound(deps, caller, { org_id: ORG, slug: 'lims', body: Buffer.from(raw), signature: `t=${t},v1=${v1}` });
  };

  // each of these was a failed insert (500), which tells the sender to retry in vain
  it.each([
    ['{"event_type":"x","payload":{},"occurred_at":"0000-01-01T00:00:00Z"}', 'occurred_at'],
    ['{"event_type":"x","payload":{},"occurred_at":"2024-01-01T00:00:00+23:00"}', 'occurred_at'],
    ['{"event_type":"x","payload":{"a":"\\ud800"}}', 'payload.a'],
    ['{"event_type":"x","payload":{"\\udc00":1}}', 'payload.\udc00'],
    ['{"event_type":"x","payload":{},"external_id":"e-\\ud83d"}', 'external_id'],
  ])('answers 400 for %s', async (raw, field) => {
    await expect(receive(raw)).rejects.toMatchObject({ kind: 'invalid', details: expect.objectContaining({ field }) });
  });

  // JSON.parse took it, then walking the payload overflowed the stack (500)
  it('answers 400 for a payload nested deeper than MAX_JSON_DEPTH, and takes one at the limit', async () => {
    const nested = (n: number) => `{"event_type":"x","payload":${'['.repeat(n)}${']'.repeat(n)}}`;
    await expect(receive(nested(100_000))).rejects.toMatchObject({ kind: 'invalid', code: 'validation_failed' });
    await expect(receive(nested(MAX_JSON_DEPTH))).rejects.toMatchObject({ kind: 'invalid' });
    // the body object is level 1, so MAX_JSON_DEPTH - 1 arrays fit
    await expect(receive(nested(MAX_JSON_DEPTH - 1))).resolves.toEqual({ event_id: 'stored', duplicate: false });
    expect(jsonProblem({ a: [{ b: [] }] }, 4)).toBeUndefined();
    expect(jsonProblem({ a: [{ b: [[]] }] }, 4)).toEqual({ kind: 'too_deep' });
    expect(jsonProblem('x', 0)).toBeUndefined();
  });

  it('stores well-formed text outside the BMP and a storable timestamp', async () => {
    await expect(receive('{"event_type":"x","payload":{"a":"\\ud83d\\ude00"},"occurred_at":"0001-01-01T00:00:00Z"}')).resolves.toMatchObject({
      event_id: 'stored',
    });
  });

  it('keeps well-formed text outside the BMP and storable timestamps', () => {
    expect(jsonProblem(JSON.parse('{"a":"\\ud83d\\ude00","\\ud83e\\uddea":["x"]}'))).toBeUndefined();
    expect(storableTimestamp('0001-01-01T00:00:00Z')).toBe(true);
    expect(storableTimestamp('2024-01-01T00:00:00-15:59')).toBe(true);
  });
});

describe('webhook subscription URLs', () => {
  const ORG = '0190a0c8-0000-7000-8000-00000000000a';
  // a NUL passed URL.canParse and failed the insert (500); a lone surrogate was stored altered
  it.each(['https://x.org/\u0000', 'https://x.org/a\u0007b', 'https://x.org/\ud800'])('refuses %j', (url) => {
    const r = createSubscriptionBody.safeParse({ org_id: ORG, url, events: ['*'] });
    expect(r.success).toBe(false);
    expect(r.error?.issues.map((i) => i.path.join('.'))).toContain('url');
  });
  it('takes an ordinary URL', () => {
    expect(createSubscriptionBody.safeParse({ org_id: ORG, url: 'https://x.org/hook?a=1&b=%00', events: ['*'] }).success).toBe(true);
  });
});
