/**
 * Fuzzing driven by the gateway's own OpenAPI document: every operation it
 * lists gets random and boundary inputs (bodies, path ids, query strings,
 * headers). The contract under test: bad input is a 4xx with the error
 * envelope, never a 5xx, and a rejected request changes nothing.
 *
 * Reproducible: FUZZ_SEED (printed) fixes every generated request.
 */
import { randomUUID } from 'node:crypto';
import fc from 'fast-check';
import { Client } from 'pg';
import { rawExchange, startStack, waitFor, type Stack } from '@lab/testing';
import { checkerFor } from './openapi-responses';

const SEED = Number(process.env.FUZZ_SEED ?? 20261122);
const CONCURRENCY = 16;
const ALL_SERVICES = ['identity', 'notebook', 'audit', 'inventory', 'equipment', 'webhooks', 'telemetry', 'orders', 'notifications', 'jobs'];

type Json = any;
interface Op {
  method: string;
  path: string;
  op: Json;
}
interface Req {
  label: string;
  method: string;
  url: string;
  headers: Record<string, string>;
  body?: string;
}
interface Outcome {
  req: Req;
  status: number;
  text: string;
  contentType?: string | null;
  location?: string | null;
}

let stack: Stack;
let doc: Json;
let ops: Op[];
let apiKey: string;
let otherKey: string;
let orgA: string;
let orgB: string;
let spareUser: string;
const realIds: string[] = [];

beforeAll(async () => {
  stack = await startStack({ services: ALL_SERVICES, trustProxy: ['loopback'] });
  const { admin } = stack;
  const a = await admin.createOrg({
    modules: ['lab_equipment', 'analytics_qc', 'sample_intake'],
    rate_limit: { per_minute: 1_000_000, per_hour: 100_000_000 },
  });
  const b = await admin.createOrg({ modules: ['lab_equipment'], rate_limit: { per_minute: 1_000_000, per_hour: 100_000_000 } });
  orgA = a.id;
  orgB = b.id;
  const user = await admin.createUser({ password: 'correct horse battery staple 1' });
  await admin.putMember(orgA, user.id, 'admin');
  spareUser = (await admin.createUser()).id;
  apiKey = (await admin.createApiKey(orgA, { scopes: ['*'], user_id: user.id })).token;
  otherKey = (await admin.createApiKey(orgB, { scopes: ['*'] })).token;
  // a few real records so item routes are exercised past the lookup
  for (const [path, body] of [
    ['/v1/samples', { name: 'fuzz sample' }],
    ['/v1/experiments', { title: 'fuzz experiment' }],
    ['/v1/equipment', { name: 'fuzz balance' }],
  ] as const) {
    const r = await fetch(`${stack.url}${path}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    const j = (await r.json()) as Json;
    if (j?.data?.id) realIds.push(j.data.id);
  }
  const res = await fetch(`${stack.url}/v1/openapi.json`);
  doc = await res.json();
  ops = [];
  for (const [path, byMethod] of Object.entries(doc.paths as Record<string, Record<string, Json>>)) {
    for (const [method, op] of Object.entries(byMethod)) {
      if (!['get', 'post', 'put', 'patch', 'delete'].includes(method)) continue;
      ops.push({ method: method.toUpperCase(), path, op });
    }
  }

  console.log(`fuzz seed ${SEED}; ${ops.length} operations`);
}, 120_000);

afterAll(async () => {
  await stack?.stop();
});

// ---------- schema helpers ----------

function deref(x: Json): Json {
  let cur = x;
  for (let i = 0; i < 10 && cur && typeof cur.$ref === 'string'; i++) {
    let node: Json = doc;
    for (const p of (cur.$ref as string).replace(/^#\//, '').split('/')) node = node?.[p];
    cur = node;
  }
  return cur;
}
const bodySchema = (op: Json): Json => deref(deref(op.requestBody)?.content?.['application/json']?.schema);
const securityKinds = (op: Json): string[] => (op.security ?? []).flatMap((s: Json) => Object.keys(s));
const isFunctions = (path: string) => path.startsWith('/functions/') || path.startsWith('/.well-known/');
const params = (op: Json, where: string): Json[] => (op.parameters ?? []).map(deref).filter((p: Json) => p?.in === where);

// ---------- value generators ----------

const huge = fc.integer({ min: 1000, max: 10_240 }).map((n) => 'x'.repeat(n));
const nastyString = fc.oneof(
  fc.string({ maxLength: 40 }),
  fc.string({ unit: 'grapheme', maxLength: 20 }),
  fc.constantFrom(
    '',
    ' ',
    'NaN',
    'Infinity',
    '-Infinity',
    'null',
    'undefined',
    'true',
    '\u0000',
    'a\u0000b',
    '💥🧪',
    'ÿ',
    '\ud800',
    '../../etc/passwd',
    '%00',
    "'; drop table x; --",
    '<script>',
    '1e999',
    '-0',
  ),
  huge,
);
const nastyNumber = fc.oneof(
  fc.integer(),
  fc.double({ noNaN: true, noDefaultInfinity: true }),
  fc.constantFrom(-1, 0, 1e9, -1e9, 1e308, -1e308, Number.MAX_SAFE_INTEGER + 2, 0.5, -0.000001, 2 ** 31, 2 ** 63),
);
const uuidLike = fc.oneof(fc.uuid(), fc.constantFrom('00000000-0000-0000-0000-000000000000', 'ffffffff-ffff-ffff-ffff-ffffffffffff'));
const wrongValue: fc.Arbitrary<Json> = fc.oneof(
  nastyString,
  nastyNumber,
  fc.boolean(),
  fc.constant(null),
  fc.constant([[[[[]]]]]),
  fc.array(fc.anything({ maxDepth: 2 }), { maxLength: 4 }),
  fc.dictionary(fc.string({ maxLength: 8 }), fc.anything({ maxDepth: 1 }), { maxKeys: 3 }),
);

function valueFor(schema: Json, depth = 0): fc.Arbitrary<Json> {
  const s = deref(schema) ?? {};
  const alts = s.anyOf ?? s.oneOf;
  if (Array.isArray(alts) && alts.length) return fc.oneof(...alts.map((x: Json) => valueFor(x, depth)));
  if (Array.isArray(s.enum) && s.enum.length) return fc.oneof({ weight: 4, arbitrary: fc.constantFrom(...s.enum) }, { weight: 1, arbitrary: nastyString });
  const type = Array.isArray(s.type) ? s.type.find((t: string) => t !== 'null') : s.type;
  if (depth > 3) return fc.constant(null);
  switch (type) {
    case 'string':
      if (s.format === 'uuid') return fc.oneof(uuidLike, fc.constantFrom(...realIds), nastyString);
      if (s.format === 'date-time')
        return fc.oneof(
          fc.date({ noInvalidDate: true }).map((d) => d.toISOString()),
          nastyString,
        );
      return fc.oneof({ weight: 3, arbitrary: fc.string({ maxLength: 30 }) }, { weight: 1, arbitrary: nastyString });
    case 'integer':
    case 'number':
      return nastyNumber;
    case 'boolean':
      return fc.oneof(fc.boolean(), fc.constantFrom('true', 1));
    case 'array':
      return fc.array(valueFor(s.items ?? {}, depth + 1), { maxLength: 4 });
    case 'object': {
      const props = Object.entries((s.properties ?? {}) as Record<string, Json>);
      if (!props.length) return fc.dictionary(fc.string({ maxLength: 8 }), fc.anything({ maxDepth: 2 }), { maxKeys: 4 });
      const rec: Record<string, fc.Arbitrary<Json>> = {};
      for (const [k, v] of props) rec[k] = fc.oneof({ weight: 5, arbitrary: valueFor(v, depth + 1) }, { weight: 1, arbitrary: wrongValue });
      return fc.record(rec, { requiredKeys: [] });
    }
    default:
      return fc.anything({ maxDepth: 2 });
  }
}

/** A body of the operation's schema in which one typed field certainly has the wrong type. */
function wrongTypedBody(schema: Json): fc.Arbitrary<Json> | undefined {
  const props = Object.entries((deref(schema)?.properties ?? {}) as Record<string, Json>).filter(([, v]) => {
    const t = deref(v)?.type;
    return typeof t === 'string' && ['string', 'integer', 'number', 'boolean', 'array', 'object'].includes(t);
  });
  if (!props.length) return undefined;
  return fc.constantFrom(...props).chain(([k, v]) => {
    const t = deref(v).type as string;
    const wrong =
      t === 'string'
        ? fc.oneof(nastyNumber, fc.boolean(), fc.constant([1]), fc.constant({ a: 1 }))
        : t === 'integer' || t === 'number'
          ? fc.constantFrom('NaN', '12', 'abc', true, [1], { n: 1 })
          : t === 'boolean'
            ? fc.constantFrom('yes', 'true', 1, 0, [true])
            : t === 'array'
              ? fc.constantFrom('a,b', 1, { 0: 'a' }, true)
              : fc.constantFrom('{}', 1, [[{}]], true);
    return fc.tuple(valueFor(schema), wrong).map(([base, w]) => ({ ...(base && typeof base === 'object' && !Array.isArray(base) ? base : {}), [k]: w }));
  });
}

/** Serialises a body, sometimes with prototype-pollution keys spliced in as own JSON keys. */
const serialise = (body: Json, pollute: boolean): string => {
  const text = JSON.stringify(body) ?? 'null';
  if (!pollute || !text.startsWith('{')) return text;
  const inject = '"__proto__":{"polluted":true,"scopes":["*"]},"constructor":{"prototype":{"polluted":true}}';
  return text === '{}' ? `{${inject}}` : `{${inject},${text.slice(1)}`;
};

// path params: real ids, ids of nothing, malformed
const pathValue = (name: string): fc.Arbitrary<string> => {
  const real = name === 'org_id' ? fc.constant(orgB) : name === 'user_id' ? fc.constant(spareUser) : fc.constantFrom(...realIds);
  return fc.oneof(
    { weight: 2, arbitrary: real },
    { weight: 3, arbitrary: uuidLike },
    {
      weight: 1,
      arbitrary: fc.constantFrom(
        'not-a-uuid',
        '0',
        '-1',
        'null',
        '%2F..%2F..%2Fadmin',
        '..%2F',
        '%00',
        '%E2%98%83',
        'a'.repeat(5000),
        `${randomUUID()}%2Fx`,
        `${randomUUID()}x`,
      ),
    },
    { weight: 1, arbitrary: fc.string({ minLength: 1, maxLength: 40 }).map(encodeURIComponent) },
  );
};
const fillPath = (path: string, values: Record<string, string>) => path.replace(/\{([^}]+)\}/g, (_, n: string) => values[n] ?? randomUUID());
const pathNames = (path: string) => [...path.matchAll(/\{([^}]+)\}/g)].map((m) => m[1]);
const pathArb = (path: string): fc.Arbitrary<string> => {
  const names = pathNames(path);
  if (!names.length) return fc.constant(path);
  return fc.tuple(...names.map(pathValue)).map((vals) => fillPath(path, Object.fromEntries(names.map((n, i) => [n, vals[i]]))));
};
const pathOfNothing = (path: string): fc.Arbitrary<string> => {
  const names = pathNames(path);
  return fc
    .tuple(...names.map(() => fc.oneof(uuidLike, fc.constantFrom('not-a-uuid', 'a'.repeat(3000), '%2F..%2F'))))
    .map((vals) => fillPath(path, Object.fromEntries(names.map((n, i) => [n, vals[i]]))));
};

const queryArb = (op: Json): fc.Arbitrary<string> => {
  const names = [...new Set([...params(op, 'query').map((p: Json) => p.name as string), 'limit', 'offset', 'order_by', 'cursor'])];
  const val = fc.oneof(
    fc.constantFrom(
      '-1',
      '0',
      '1',
      '1e9',
      'abc',
      '',
      '99999999999999999999',
      'NaN',
      '1.5',
      'name',
      '-name',
      'name;drop',
      '__proto__',
      '%00',
      'true',
      '\u0000',
      'a\u0000b',
    ),
    fc.string({ maxLength: 20 }),
    fc.constant('q'.repeat(3000)),
  );
  return fc
    .array(fc.tuple(fc.constantFrom(...names, 'filter[x]', 'unknown', '__proto__'), val), { maxLength: 5 })
    .map((pairs) => (pairs.length ? '?' + pairs.map(([k, v]) => `${encodeURIComponent(k)}=${encodeURIComponent(v)}`).join('&') : ''));
};

// header values must be ByteStrings for fetch: printable latin-1 only
const headerText = fc.string({ maxLength: 60 }).map((s) => s.replace(/[^\x20-\x7e]/g, 'z'));
const authHeader = (good: string): fc.Arbitrary<string | undefined> =>
  fc.oneof(
    { weight: 6, arbitrary: fc.constant(good) },
    { weight: 1, arbitrary: fc.constant(undefined) },
    { weight: 1, arbitrary: headerText.map((s) => `Bearer ${s}`) },
    {
      weight: 1,
      arbitrary: fc.constantFrom(
        'Bearer',
        'Bearer ',
        'Basic Zm9vOmJhcg==',
        'bearer x y z',
        `Bearer ${'t'.repeat(5000)}`,
        `Bearer ${stack.operatorToken}`,
        `Bearer ${apiKey}`,
        `Bearer ${otherKey}`,
        'Bearer lab_sk_garbage',
      ),
    },
  );

const goodAuth = (kinds: string[]): string | undefined => {
  if (kinds.includes('operator')) return `Bearer ${stack.operatorToken}`;
  if (kinds.includes('bearer') || kinds.includes('session')) return `Bearer ${apiKey}`;
  return undefined;
};

const withBody = (method: string) => method !== 'GET' && method !== 'DELETE';

/** Anything goes: only "no 5xx, proper envelope" is required of the answers. */
function wildArb(o: Op): fc.Arbitrary<Req> {
  const schema = bodySchema(o.op);
  const good = goodAuth(securityKinds(o.op));
  const body: fc.Arbitrary<Json> = fc.oneof(
    { weight: schema ? 4 : 0, arbitrary: schema ? valueFor(schema) : fc.constant({}) },
    { weight: 1, arbitrary: fc.anything({ maxDepth: 3 }) },
    { weight: 1, arbitrary: fc.object({ maxDepth: 2 }) },
    { weight: 1, arbitrary: wrongValue },
  );
  return fc
    .record({
      path: pathArb(o.path),
      query: queryArb(o.op),
      auth: good ? authHeader(good) : fc.oneof(fc.constant(undefined), authHeader(`Bearer ${apiKey}`)),
      orgHeader: fc.option(fc.oneof(fc.constant(orgB), fc.constant(orgA), uuidLike, headerText), { freq: 3 }),
      idem: fc.option(fc.oneof(fc.uuid(), fc.constantFrom('', 'a', 'k'.repeat(300), 'clé-ü-ÿ', 'key with spaces', 'x'.repeat(64))), { freq: 2 }),
      testMode: fc.option(fc.constantFrom('true', 'false', '1', '0', 'yes', '', 'TRUE', 'garbage'), { freq: 4 }),
      signature: fc.option(fc.oneof(headerText, fc.constantFrom('sha256=', 'sha256=00', `t=${Date.now()},v1=${'0'.repeat(64)}`, 'v1=zz')), { freq: 2 }),
      contentType: fc.oneof(
        { weight: 6, arbitrary: fc.constant('application/json') },
        {
          weight: 1,
          arbitrary: fc.constantFrom(
            'text/plain',
            'application/x-www-form-urlencoded',
            'multipart/form-data; boundary=x',
            'application/json; charset=latin1',
            'application/xml',
            '',
          ),
        },
      ),
      body,
      raw: fc.option(fc.constantFrom('{', '{"a":', '[1,2', 'null', '""', '\u0000', '{"a":1}{"b":2}', '{"a":"\\ud800"}', 'x'.repeat(20_000)), { freq: 8 }),
      pollute: fc.boolean(),
    })
    .map((g) => {
      const headers: Record<string, string> = {};
      if (g.auth) headers.authorization = g.auth;
      if (g.orgHeader != null) headers['x-org-id'] = g.orgHeader;
      if (g.idem != null) headers['idempotency-key'] = g.idem;
      if (g.testMode != null) headers['x-test-mode'] = g.testMode;
      if (g.signature != null) headers['x-service-signature'] = g.signature;
      let body: string | undefined;
      if (withBody(o.method)) {
        body = g.raw ?? serialise(g.body, g.pollute);
        if (g.contentType) headers['content-type'] = g.contentType;
      }
      return { label: `${o.method} ${o.path}`, method: o.method, url: `${stack.url}${g.path}${g.query}`, headers, body };
    });
}

/**
 * Requests that must be rejected whatever the route: no/garbage/wrong-kind
 * credentials, non-object bodies, bodies with a field of the wrong type,
 * malformed idempotency keys, ids of nothing on item routes.
 */
function rejectedArb(o: Op): fc.Arbitrary<Req> | undefined {
  const kinds = securityKinds(o.op);
  const good = goodAuth(kinds);
  const schema = bodySchema(o.op);
  const variants: fc.Arbitrary<{ path: string; headers: Record<string, string>; body?: Json; raw?: string }>[] = [];
  const add = (name: string, a: (typeof variants)[number]) => {
    variants.push(a.map((v) => ({ ...v, variant: name })));
  };
  const json = { 'content-type': 'application/json' };
  const validPath = pathArb(o.path);
  const plainBody = withBody(o.method) ? (schema ? valueFor(schema) : fc.constant({})) : fc.constant(undefined);
  if (good) {
    // credentials missing, garbage, or of the wrong kind
    const badAuth = fc.oneof(
      fc.constant(undefined),
      headerText.map((s) => `Bearer ${s}`),
      fc.constantFrom(
        'Bearer',
        'Basic Zm9vOmJhcg==',
        `Bearer ${'t'.repeat(5000)}`,
        'Bearer lab_sk_garbage',
        kinds.includes('operator') ? `Bearer ${apiKey}` : `Bearer op_${'z'.repeat(32)}`,
      ),
    );
    add(
      'bad-auth',
      fc.record({ path: validPath, auth: badAuth, body: plainBody }).map((g) => ({
        path: g.path,
        headers: { ...json, ...(g.auth ? { authorization: g.auth } : {}) },
        body: g.body,
      })),
    );
  }
  const auth = good ? { authorization: good } : {};
  if (withBody(o.method) && schema && (good || !o.path.startsWith('/functions/v1/inbound-webhook'))) {
    // the body is not an object at all
    add(
      'non-object-body',
      fc
        .record({
          path: validPath,
          body: fc.oneof(fc.array(fc.anything({ maxDepth: 1 }), { maxLength: 3 }), nastyNumber, fc.constant(null), fc.constantFrom('a', 'NaN')),
        })
        .map((g) => ({
          path: g.path,
          headers: { ...json, ...auth },
          body: g.body,
        })),
    );
    const wrong = wrongTypedBody(schema);
    if (wrong)
      add(
        'wrong-type-field',
        fc.record({ path: validPath, body: wrong }).map((g) => ({ path: g.path, headers: { ...json, ...auth }, body: g.body })),
      );
    add(
      'malformed-json',
      fc
        .record({ path: validPath, raw: fc.constantFrom('{', '{"a":', '[1,2', '{"a":1}{"b":2}', '\u0000') })
        .map((g) => ({ path: g.path, headers: { ...json, ...auth }, raw: g.raw })),
    );
  }
  if (good && withBody(o.method) && params(o.op, 'header').some((p: Json) => String(p.name).toLowerCase() === 'idempotency-key')) {
    add(
      'bad-idempotency-key',
      fc.record({ path: validPath, body: plainBody, key: fc.constantFrom('', 'a', 'k'.repeat(300), 'clé-ü-ÿ-ü', 'key with spaces') }).map((g) => ({
        path: g.path,
        headers: { ...json, ...auth, 'idempotency-key': g.key },
        body: g.body,
      })),
    );
  }
  // ids of nothing (or malformed ids) on item routes: lookups fail before anything is written
  if (pathNames(o.path).length && o.method !== 'PUT' && !isFunctions(o.path)) {
    add(
      'id-of-nothing',
      fc.record({ path: pathOfNothing(o.path), body: plainBody }).map((g) => ({ path: g.path, headers: { ...json, ...auth }, body: g.body })),
    );
  }
  if (!variants.length) return undefined;
  return fc.oneof(...variants).map((v) => ({
    label: `${o.method} ${o.path} [${(v as Json).variant}]`,
    method: o.method,
    url: `${stack.url}${v.path}`,
    headers: withBody(o.method) ? v.headers : Object.fromEntries(Object.entries(v.headers).filter(([k]) => k !== 'content-type')),
    body: withBody(o.method) ? (v.raw ?? serialise(v.body === undefined ? {} : v.body, false)) : undefined,
  }));
}

// ---------- sending and judging ----------

async function send(req: Req): Promise<Outcome> {
  try {
    const res = await fetch(req.url, { method: req.method, headers: req.headers, body: req.body, redirect: 'manual', signal: AbortSignal.timeout(20_000) });
    // streams (SSE) are not read to the end
    if ((res.headers.get('content-type') ?? '').includes('text/event-stream')) {
      await res.body?.cancel();
      return { req, status: res.status, text: '', contentType: res.headers.get('content-type') };
    }
    return { req, status: res.status, text: await res.text(), contentType: res.headers.get('content-type'), location: res.headers.get('location') };
  } catch (err) {
    return { req, status: 0, text: String(err) };
  }
}

/**
 * The generated requests come from many clients, as a fuzzer's would on the
 * internet: each names its own address (the stack trusts X-Forwarded-For from
 * loopback), so the throttles keyed by client address (wrong operator tokens,
 * sign-in) do not turn on the test's own later requests from 127.0.0.1.
 */
function fromAnywhere(req: Req, i: number): Req {
  return { ...req, headers: { 'x-forwarded-for': `198.18.${(i >> 8) & 255}.${i & 255}`, ...req.headers } };
}

async function runAll(reqs: Req[]): Promise<Outcome[]> {
  const out: Outcome[] = new Array(reqs.length);
  let next = 0;
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (next < reqs.length) {
        const i = next++;
        out[i] = await send(fromAnywhere(reqs[i]!, i));
      }
    }),
  );
  return out;
}

const envelopeOk = (o: Outcome): boolean => {
  const path = new URL(o.req.url).pathname;
  if (isFunctions(path) || path.startsWith('/auth/v1/')) return true; // OAuth / RFC 6749 / HTML errors there
  try {
    const b = JSON.parse(o.text);
    if (b?.error && typeof b.error.code === 'string' && typeof b.error.message === 'string') return true;
    return b?.data === null && b?.error === 'idempotency_key_conflict';
  } catch {
    return false;
  }
};

const describeOutcome = (o: Outcome) =>
  `${o.status} ${o.req.label} ${o.req.url.slice(stack.url.length, stack.url.length + 160)} hdr=${JSON.stringify(o.req.headers).slice(0, 200)} body=${(o.req.body ?? '').slice(0, 200)} -> ${o.text.slice(0, 300)}`;

/**
 * What is wrong with the answers: a 5xx or a broken connection, an error outside
 * the envelope, or any answer (refusals included) that is not what the document
 * says for its operation and status (a streamed answer is checked by status and
 * content type only).
 */
function problems(outcomes: Outcome[]): string[] {
  const bad: string[] = [];
  const checker = checkerFor(stack.url);
  for (const o of outcomes) {
    if (o.status === 0 || o.status >= 500) bad.push(`5xx/transport: ${describeOutcome(o)}`);
    else if (o.status >= 400 && !envelopeOk(o)) bad.push(`envelope: ${describeOutcome(o)}`);
    else {
      const url = new URL(o.req.url);
      const found = checker.problems({
        method: o.req.method,
        path: url.pathname,
        status: o.status,
        contentType: o.contentType ?? null,
        text: o.text,
        location: o.location,
      });
      if (found.length) bad.push(`document: ${found[0]!.slice(0, 300)} <- ${describeOutcome(o)}`);
    }
  }
  return bad;
}

/** Row counts of every table of every service schema in the stack's database. */
async function rowCounts(): Promise<Record<string, number>> {
  const db = new Client({ connectionString: stack.databaseUrl });
  await db.connect();
  try {
    const tables = await db.query<{ s: string; t: string }>(
      `select table_schema as s, table_name as t from information_schema.tables
        where table_type = 'BASE TABLE' and table_schema not in ('pg_catalog', 'information_schema') order by 1, 2`,
    );
    const counts: Record<string, number> = {};
    for (const { s, t } of tables.rows) {
      const r = await db.query<{ n: string }>(`select count(*)::text as n from "${s}"."${t}"`);
      counts[`${s}.${t}`] = Number(r.rows[0].n);
    }
    return counts;
  } finally {
    await db.end();
  }
}

/** Waits until asynchronous consumers (audit, inboxes) have caught up with setup. */
async function settledCounts(): Promise<Record<string, number>> {
  // settled: the same counts twice, half a second apart (the first look only sets the baseline)
  let prev = '';
  return waitFor(
    'the row counts to stop changing',
    async () => {
      const cur = await rowCounts();
      const same = JSON.stringify(cur) === prev;
      prev = JSON.stringify(cur);
      return same ? cur : undefined;
    },
    { timeoutMs: 20_000, intervalMs: 500 },
  );
}

const dedupe = (xs: string[]) => [...new Set(xs.map((x) => x.slice(0, 400)))].slice(0, 40);

/**
 * The four classes of contract bug the schema-driven fuzzer found, each swept
 * over every operation of the document it applies to, so a new route that
 * repeats one fails here rather than waiting for a random draw. First, while the
 * operator token's budget (3,000 a minute) is not yet spent by the random phases.
 */
describe('bug classes the fuzzer found, swept over the document', () => {
  const jsonHeaders = (o: Op): Record<string, string> => {
    const good = goodAuth(securityKinds(o.op));
    return { 'content-type': 'application/json', ...(good ? { authorization: good } : {}) };
  };
  /** A path of the operation whose ids exist where the test has real ones (an organisation, samples). */
  const realPath = (path: string, id?: string) =>
    fillPath(path, { org_id: orgB, user_id: spareUser, id: id ?? realIds[0]!, sub_id: randomUUID(), client_id: randomUUID(), token_id: randomUUID() });

  it('refuses an X-Test-Mode other than true or false with 400 on every operation that honours it, and writes nothing', async () => {
    const testModeOps = ops.filter((o) => params(o.op, 'header').some((p: Json) => p.name === 'X-Test-Mode'));
    expect(testModeOps.length).toBeGreaterThan(20);
    const before = stack.databaseUrl ? await settledCounts() : undefined;
    const reqs: Req[] = [];
    for (const o of testModeOps) {
      const schema = bodySchema(o.op);
      const [body] = schema ? fc.sample(valueFor(schema), { seed: SEED, numRuns: 1 }) : [undefined];
      for (const value of ['yes', '1', 'on', 'TRUE!', 'truee', '']) {
        reqs.push({
          label: `${o.method} ${o.path} [X-Test-Mode: ${value}]`,
          method: o.method,
          url: `${stack.url}${realPath(o.path)}`,
          headers: { ...jsonHeaders(o), 'x-test-mode': value },
          body: withBody(o.method) ? JSON.stringify(body && typeof body === 'object' && !Array.isArray(body) ? body : { name: 'x' }) : undefined,
        });
      }
    }
    const outcomes = await runAll(reqs);
    const wrong = outcomes.filter((o) => o.status !== 400 || !envelopeOk(o)).map(describeOutcome);
    expect(dedupe(wrong)).toEqual([]);
    if (before) expect(await settledCounts()).toEqual(before);
  }, 300_000);

  it('refuses null, arrays and scalars as a body with 400 in the error envelope wherever an object is expected', async () => {
    // (the signing route takes a signed-in user's session token, which this test has not: it is 401 before the body)
    const objectOps = ops.filter(
      (o) =>
        withBody(o.method) && bodySchema(o.op) && !isFunctions(o.path) && !o.path.startsWith('/auth/v1/oauth/') && !securityKinds(o.op).includes('session'),
    );
    expect(objectOps.length).toBeGreaterThan(40);
    const reqs: Req[] = [];
    for (const o of objectOps) {
      for (const raw of ['null', '[]', '[{}]', '1', '"text"', 'true', 'false']) {
        reqs.push({
          label: `${o.method} ${o.path} [body ${raw}]`,
          method: o.method,
          url: `${stack.url}${realPath(o.path)}`,
          headers: jsonHeaders(o),
          body: raw,
        });
      }
    }
    const outcomes = await runAll(reqs);
    // a route with ids in its path may find first that an id names nothing (404); a body is never taken
    const wrong = outcomes.filter((o) => {
      const hasIds = /\{[^}]+\}/.test(o.req.label.split(' ')[1]!);
      return !envelopeOk(o) || !(o.status === 400 || (hasIds && o.status === 404));
    });
    expect(dedupe(wrong.map(describeOutcome))).toEqual([]);
  }, 300_000);

  it("takes the document's default offset (0) with keyset paging on every list that documents both", async () => {
    const keysetOps = ops.filter((o) => {
      const names = params(o.op, 'query').map((p: Json) => p.name);
      return o.method === 'GET' && names.includes('since_created_at') && names.includes('offset');
    });
    expect(keysetOps.length).toBeGreaterThan(8);
    const reqs = keysetOps.map((o) => {
      const defaults = params(o.op, 'query')
        .filter((p: Json) => p.schema?.default !== undefined)
        .map((p: Json) => `${p.name}=${p.schema.default}`);
      return {
        label: `${o.method} ${o.path} [keyset with defaults]`,
        method: 'GET',
        url: `${stack.url}${realPath(o.path, realIds[2])}?${[...defaults, 'since_created_at=2000-01-01T00:00:00Z'].join('&')}`,
        headers: { authorization: `Bearer ${apiKey}` },
      };
    });
    const outcomes = await runAll(reqs);
    expect(dedupe(outcomes.filter((o) => o.status !== 200).map(describeOutcome))).toEqual([]);
  }, 300_000);

  it("keeps the management API's limits where the document states them: modules, and Allow on every path", async () => {
    const orgBody = deref(doc.components.schemas.AdminCreateOrgBody);
    const max = orgBody.properties.modules.maxItems as number;
    expect(max).toBeGreaterThan(0);
    const names = orgBody.properties.modules.items.enum as string[];
    const modules = (n: number) => Array.from({ length: n }, (_, i) => names[i % names.length]);
    const post = (body: unknown) =>
      send({
        label: 'createOrg',
        method: 'POST',
        url: `${stack.url}/admin/v1/orgs`,
        headers: { authorization: `Bearer ${stack.operatorToken}`, 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
    expect((await post({ name: 'at the limit', modules: modules(max) })).status).toBe(201);
    const over = await post({ name: 'over the limit', modules: modules(max + 1) });
    expect([over.status, JSON.parse(over.text).error?.code]).toEqual([400, 'validation_failed']);

    // a method a path does not have: 405, and Allow names exactly the document's methods
    // of that path, and HEAD wherever GET is (the document says so once, in its description)
    expect(doc.info.description).toContain('HEAD');
    const wrong: string[] = [];
    for (const [path, byMethod] of Object.entries(doc.paths as Record<string, Record<string, Json>>)) {
      const documented = Object.keys(byMethod)
        .filter((m) => ['get', 'post', 'put', 'patch', 'delete'].includes(m))
        .flatMap((m) => (m === 'get' ? ['GET', 'HEAD'] : [m.toUpperCase()]))
        .sort();
      for (const method of ['OPTIONS', ...['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE'].filter((m) => !documented.includes(m))]) {
        const res = await fetch(`${stack.url}${realPath(path)}`, { method, headers: { authorization: `Bearer ${apiKey}` } });
        await res.arrayBuffer();
        const allow = (res.headers.get('allow') ?? '')
          .split(',')
          .map((s) => s.trim())
          .filter(Boolean)
          .sort();
        if (res.status !== 405 || JSON.stringify(allow) !== JSON.stringify(documented))
          wrong.push(`${method} ${path}: ${res.status} Allow ${allow.join(',')} (document: ${documented.join(',')})`);
      }
    }
    expect(wrong).toEqual([]);
  }, 300_000);
});

// before the random phases too: they spend the operator token's budget (3,000 a minute)
describe('findings of the fuzz test, pinned', () => {
  it('management routes of an organisation identity does not know answer 404 and create nothing', async () => {
    const nobody = randomUUID();
    const before = stack.databaseUrl ? await settledCounts() : undefined;
    const probes: [string, unknown][] = [
      [`/admin/v1/orgs/${nobody}/inbound-endpoints`, {}],
      [`/admin/v1/orgs/${nobody}/webhook-subscriptions`, { url: 'https://hooks.example.org/x', events: ['*'] }],
      [`/admin/v1/orgs/${nobody}/environmental-points`, { parameter: 'temperature', unit: 'K' }],
      [`/admin/v1/orgs/${nobody}/departments`, { name: 'QC' }],
      [`/admin/v1/orgs/${nobody}/api-keys`, { name: 'k', scopes: ['read'] }],
    ];
    for (const [path, body] of probes) {
      const r = await send({
        label: path,
        method: 'POST',
        url: `${stack.url}${path}`,
        headers: { authorization: `Bearer ${stack.operatorToken}`, 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
      expect([path, r.status, JSON.parse(r.text).error?.code]).toEqual([path, 404, 'not_found']);
    }
    if (before) expect(await settledCounts()).toEqual(before);
  });

  it('answers headers too large for the HTTP parser with the error envelope', async () => {
    const r = await send({
      label: 'big',
      method: 'GET',
      url: `${stack.url}/v1/samples`,
      headers: { authorization: `Bearer ${apiKey}`, 'x-padding': 'p'.repeat(20_000) },
    });
    expect(r.status).toBe(431);
    expect(JSON.parse(r.text)).toEqual({ error: { code: 'headers_too_large', message: expect.any(String) } });
    // a long query string counts too, on any operation, and the document lists the answer (seed 777)
    const long = await send({
      label: 'long',
      method: 'PATCH',
      url: `${stack.url}/v1/equipment/${randomUUID()}/usage/${randomUUID()}?q=${'q'.repeat(17_000)}`,
      headers: {},
    });
    expect(long.status).toBe(431);
    expect(problems([long])).toEqual([]);
  });

  it('serves a request with an expectation other than 100-continue rather than a bare 417', async () => {
    const answer = await rawExchange(
      stack.url,
      `GET /v1/samples HTTP/1.1\r\nHost: lab\r\nAuthorization: Bearer ${apiKey}\r\nExpect: 200-ok\r\nConnection: close\r\n\r\n`,
    );
    expect(answer).toMatch(/^HTTP\/1\.1 200 OK\r\n[^]*\r\n\r\n\{"data":/);
  });

  it('refuses what the gateway refuses before an OAuth endpoint runs in that endpoint’s error language', async () => {
    const at = (method: string, path: string, headers: Record<string, string>, body?: string) =>
      send({ label: path, method, url: `${stack.url}${path}`, headers: { 'x-forwarded-for': '198.19.0.1', ...headers }, body });
    const asJson = { 'content-type': 'application/json' };
    const asForm = { 'content-type': 'application/x-www-form-urlencoded' };
    // RFC 6749 5.2 / RFC 7591 3.2.2: `error` is a string an OAuth client library reads
    for (const path of ['/auth/v1/oauth/register', '/auth/v1/oauth/token', '/functions/v1/oauth-token']) {
      const r = await at('POST', path, asJson, '{"redirect_uris":');
      expect([path, r.status, r.contentType, JSON.parse(r.text)]).toEqual([
        path,
        400,
        'application/json; charset=utf-8',
        { error: 'invalid_request', error_description: 'request body is not valid JSON' },
      ]);
    }
    // a browser on the authorization endpoint gets a page, here for a query PostgreSQL cannot store
    for (const path of ['/auth/v1/oauth/authorize', '/functions/v1/oauth-authorize']) {
      const r = await at('POST', `${path}?state=a%00b`, asForm, 'step=login');
      expect([path, r.status, r.contentType?.split(';')[0]]).toEqual([path, 400, 'text/html']);
      expect(r.text).toContain('invalid_request');
    }
    // the problems() check holds these answers to the document too
    const answers = await Promise.all([at('POST', '/auth/v1/oauth/register', asJson, '['), at('GET', '/v1/health?x=%00', {})]);
    expect(answers.map((a) => a.status)).toEqual([400, 400]);
    expect(problems(answers)).toEqual([]);
  });
});

describe('OpenAPI-driven fuzzing', () => {
  it('rejects certainly-bad requests with an enveloped 4xx and writes nothing', async () => {
    const reqs: Req[] = [];
    ops.forEach((o, i) => {
      const arb = rejectedArb(o);
      if (arb) reqs.push(...fc.sample(arb, { seed: SEED + i, numRuns: 40 }));
    });
    const before = stack.databaseUrl ? await settledCounts() : undefined;

    console.log(before ? `counting rows of ${Object.keys(before).length} tables` : 'no databaseUrl: row counts skipped');
    const outcomes = await runAll(reqs);
    const notRejected = outcomes.filter((o) => o.status < 400 || o.status >= 500).map(describeOutcome);

    console.log(`fuzz phase "rejected": ${outcomes.length} requests (seed ${SEED})`);
    expect(dedupe([...problems(outcomes), ...notRejected])).toEqual([]);
    if (before) {
      const after = await settledCounts();
      const changed = Object.keys(after)
        .filter((k) => after[k] !== before[k])
        .map((k) => `${k}: ${before[k]} -> ${after[k]}`);
      expect(changed).toEqual([]);
    }
    expect(outcomes.length).toBeGreaterThan(3000);
  }, 300_000);

  it('answers random and boundary input on every operation without a 5xx', async () => {
    const reqs: Req[] = [];
    ops.forEach((o, i) => {
      reqs.push(...fc.sample(wildArb(o), { seed: SEED + 10_000 + i, numRuns: 60 }));
    });
    const outcomes = await runAll(reqs);
    const byStatus: Record<number, number> = {};
    for (const o of outcomes) byStatus[o.status] = (byStatus[o.status] ?? 0) + 1;

    console.log(`fuzz phase "wild": ${outcomes.length} requests (seed ${SEED}), statuses ${JSON.stringify(byStatus)}`);
    expect(dedupe(problems(outcomes))).toEqual([]);
    expect(outcomes.length).toBeGreaterThan(6000);
  }, 300_000);

  // Not left to chance: every documented query parameter of every operation, with
  // valid credentials, gets each boundary value once (a NUL reaching a statement
  // as a parameter was a 500 the random phases did not happen to draw).
  it("answers every documented query parameter's boundary values without a 5xx", async () => {
    // as they go on the wire: a NUL, bytes that are no UTF-8 (an encoded surrogate, 0xFF), ...
    const values = ['%00', 'a%00b', '', '%20', '-1', '99999999999999999999', 'q'.repeat(3000), '%ED%A0%80', '%FF', '2026-13-45T25%3A61%3A00Z'];
    const reqs: Req[] = [];
    ops.forEach((o, i) => {
      const good = goodAuth(securityKinds(o.op));
      const [path] = fc.sample(pathArb(o.path), { seed: SEED + 20_000 + i, numRuns: 1 });
      for (const name of params(o.op, 'query').map((p: Json) => p.name as string)) {
        for (const v of values) {
          reqs.push({
            label: `${o.method} ${o.path} [query ${name}]`,
            method: o.method,
            url: `${stack.url}${path}?${encodeURIComponent(name)}=${v}`,
            headers: { ...(good ? { authorization: good } : {}), ...(withBody(o.method) ? { 'content-type': 'application/json' } : {}) },
            body: withBody(o.method) ? '{}' : undefined,
          });
        }
      }
    });
    const outcomes = await runAll(reqs);

    console.log(`fuzz phase "query sweep": ${outcomes.length} requests`);
    expect(dedupe(problems(outcomes))).toEqual([]);
    expect(outcomes.length).toBeGreaterThan(300);
  }, 300_000);
});
