// Audit paging at depth. One organisation's audit log is seeded straight into
// audit.records with generate_series (rows shaped like real ones: a small before
// and after document, one changed field), first 10,000 rows, then grown to
// 1,000,000 (VACUUM ANALYZE after each step). At each size, GET /v1/audit?limit=100 is
// timed through the whole stack (HTTP, gateway auth, gRPC, audit service,
// PostgreSQL), one request at a time: the first page, and a walk of pages deep in
// the log (starting mid-log, then following the next_cursor the API returns, as a
// client does). Figures are the median (min-max) page latency; the target is
// median(1M) / median(10k) <= 1.20 for both the first page and the deep pages. As a
// noise check, a second organisation holding 10,000 rows in the same table is timed
// in alternating blocks with the first in both phases: its drift from phase to phase
// is machine load, and the ratio divided by it is printed as load-corrected. Finally the
// exact statement listRecords issues (compiled from the built service code, with a
// cursor) is run under EXPLAIN ANALYZE at 1M rows: the plan must be an Index Scan on
// records_org_keyset_idx with no Seq Scan and no Sort, otherwise the script exits 1.
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { seedOrg, startCluster } from './cluster.mjs';
import { saveResult } from './results.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const require = createRequire(import.meta.url);
const PAGES = Number(process.env.BENCH_PAGES ?? 200);
const WARMUP = 100;
const LIMIT = 100;
const SMALL = 10_000;
const LARGE = Number(process.env.BENCH_AUDIT_ROWS ?? 1_000_000);
const TARGET = 1.2;

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};
const stats = (xs) => ({ median_ms: +median(xs).toFixed(3), min_ms: +Math.min(...xs).toFixed(3), max_ms: +Math.max(...xs).toFixed(3), n: xs.length });
const fmt = (s) => `${s.median_ms.toFixed(2)} ms (${s.min_ms.toFixed(2)}-${s.max_ms.toFixed(2)})`;

/** Appends rows [from, to) to an org's log, one per 30 s of simulated time, oldest first. */
async function seed(c, orgId, from, to) {
  await c.query(
    `insert into audit.records (id, org_id, created_at, occurred_at, service, action, resource, record_id,
       actor_user_id, actor_token_id, token_kind, changed_fields, before, after, request_id)
     select gen_random_uuid(), $1::uuid, t, t - interval '5 ms', 'notebook', 'update', 'samples', gen_random_uuid()::text,
       null, gen_random_uuid(), 'api_key', array['status'],
       jsonb_build_object('name', 'sample-' || i, 'status', 'received', 'quantity', i % 97),
       jsonb_build_object('name', 'sample-' || i, 'status', 'in_storage', 'quantity', i % 97),
       'req-' || i
     from generate_series($2::int, $3::int - 1) as i,
       lateral (select timestamptz '2020-01-01 00:00:00+00' + i * interval '30 s' as t) ts`,
    [orgId, from, to],
  );
  // VACUUM as well: an aged log has its hint bits set and its visibility map built,
  // so the first read of a page is not a write here either.
  await c.query('vacuum analyze audit.records');
}

/** The cursor the API would hand out after row `pos` (0-based, in keyset order). */
async function cursorAt(c, orgId, pos) {
  const { rows } = await c.query(
    `select to_char(created_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') as since_created_at, id as since_id
     from audit.records where org_id = $1 order by created_at, id offset $2 limit 1`,
    [orgId, pos],
  );
  return rows[0];
}

async function page(base, token, cursor) {
  const qs = new URLSearchParams({ limit: String(LIMIT), ...(cursor ?? {}) });
  const t0 = performance.now();
  const res = await fetch(`${base}/v1/audit?${qs}`, { headers: { authorization: `Bearer ${token}` } });
  const body = await res.json();
  const ms = performance.now() - t0;
  if (res.status !== 200) throw new Error(`GET /v1/audit -> ${res.status} ${JSON.stringify(body)}`);
  if (body.count !== LIMIT && body.next_cursor) throw new Error(`short page with a cursor: ${body.count}`);
  return { ms, next: body.next_cursor };
}

/** A walker over an org's log from a deep starting cursor, following next_cursor, restarting at the start cursor at the end. */
function walker(base, token, start) {
  let cursor = start;
  return async () => {
    const { ms, next } = await page(base, token, cursor);
    cursor = next ?? start;
    return ms;
  };
}

async function timeWalk(step, n) {
  const xs = [];
  for (let i = 0; i < n; i++) xs.push(await step());
  return xs;
}

/** The SQL text and parameters listRecords sends, captured from the built service code. */
async function serviceStatement(orgId, cursor) {
  const { listRecords, parseListRequest } = require(join(here, '../services/audit/dist/audit-log.js'));
  const { PgDialect } = require('drizzle-orm/pg-core');
  let captured;
  const fakeDb = {
    rows: async (q) => {
      captured = new PgDialect().sqlToQuery(q);
      return [];
    },
  };
  await listRecords(fakeDb, orgId, parseListRequest({ limit: LIMIT, ...cursor }));
  return captured;
}

const cluster = await startCluster(['identity', 'audit']);
const c = new pg.Client({ connectionString: cluster.db.url });
let exitCode = 0;
try {
  await c.connect();
  const { org, token } = await seedOrg(cluster.url, cluster.operatorToken);
  const control = await seedOrg(cluster.url, cluster.operatorToken);
  // The org creation itself writes a few audit rows through the bus; wait for them
  // so they do not land mid-measurement, then count them into the totals.
  await new Promise((r) => setTimeout(r, 1000));

  let t = performance.now();
  await seed(c, org.id, 0, SMALL);
  await seed(c, control.org.id, 0, SMALL);
  console.log(`seeded 2 x ${SMALL} rows in ${((performance.now() - t) / 1000).toFixed(1)} s`);

  // 10k: warm up (connections, V8 optimising both processes, buffer cache), then
  // measure. Every figure is taken in blocks of 20 requests alternating with the
  // same requests on the control org, so the control's drift between the 10k and
  // the 1M phase shows how much of the ratio is machine load, not depth.
  const smallWalk = walker(cluster.url, token, await cursorAt(c, org.id, SMALL / 2));
  const controlWalk = walker(cluster.url, control.token, await cursorAt(c, control.org.id, SMALL / 2));
  const controlFirst = () => page(cluster.url, control.token).then((r) => r.ms);
  const phase = async (firstOfOrg, walkOfOrg) => {
    await timeWalk(firstOfOrg, WARMUP);
    await timeWalk(walkOfOrg, WARMUP);
    await timeWalk(controlFirst, WARMUP);
    await timeWalk(controlWalk, WARMUP);
    const r = { first: [], deep: [], controlFirst: [], controlDeep: [] };
    for (let i = 0; i < PAGES; i += 20) {
      r.first.push(...(await timeWalk(firstOfOrg, 20)));
      r.controlFirst.push(...(await timeWalk(controlFirst, 20)));
      r.deep.push(...(await timeWalk(walkOfOrg, 20)));
      r.controlDeep.push(...(await timeWalk(controlWalk, 20)));
    }
    return r;
  };
  const orgFirst = () => page(cluster.url, token).then((r) => r.ms);
  const small = await phase(orgFirst, smallWalk);

  t = performance.now();
  await seed(c, org.id, SMALL, LARGE);
  const {
    rows: [{ n: orgRows }],
  } = await c.query('select count(*)::int as n from audit.records where org_id = $1', [org.id]);
  console.log(`grew the log to ${orgRows} rows in ${((performance.now() - t) / 1000).toFixed(1)} s`);

  // 1M: the walk starts mid-log, 500,000 rows deep, and reads rows it has not read before.
  const largeWalk = walker(cluster.url, token, await cursorAt(c, org.id, Math.floor(LARGE / 2)));
  const large = await phase(orgFirst, largeWalk);

  // The plan of the statement the service sends for a deep page.
  const stmt = await serviceStatement(org.id, await cursorAt(c, org.id, Math.floor(LARGE * 0.9)));
  const { rows: planRows } = await c.query(`explain (analyze, buffers off) ${stmt.sql}`, stmt.params);
  const plan = planRows.map((r) => r['QUERY PLAN']).join('\n');
  const planOk = /Index Scan using records_org_keyset_idx/.test(plan) && !/Seq Scan|Sort|Bitmap/.test(plan);
  const planMs = Number(/Execution Time: ([\d.]+) ms/.exec(plan)?.[1]);

  const figures = {
    first_page_10k: stats(small.first),
    first_page_1m: stats(large.first),
    deep_page_10k: stats(small.deep),
    deep_page_1m: stats(large.deep),
    control_first_page_10k_phase: stats(small.controlFirst),
    control_first_page_1m_phase: stats(large.controlFirst),
    control_deep_page_10k_phase: stats(small.controlDeep),
    control_deep_page_1m_phase: stats(large.controlDeep),
  };
  const m = (k) => figures[k].median_ms;
  const ratioFirst = m('first_page_1m') / m('first_page_10k');
  const ratioDeep = m('deep_page_1m') / m('deep_page_10k');
  // the same ratio with each phase divided by the control org measured alongside it
  const driftFirst = m('control_first_page_1m_phase') / m('control_first_page_10k_phase');
  const driftDeep = m('control_deep_page_1m_phase') / m('control_deep_page_10k_phase');
  const ratioFirstCorrected = ratioFirst / driftFirst;
  const ratioDeepCorrected = ratioDeep / driftDeep;
  const pass = ratioFirst <= TARGET && ratioDeep <= TARGET && planOk;

  console.log(`audit first page (limit ${LIMIT}), 10k rows: ${fmt(figures.first_page_10k)}`);
  console.log(
    `audit first page (limit ${LIMIT}), 1M rows:  ${fmt(figures.first_page_1m)}  ratio 1M/10k ${ratioFirst.toFixed(2)} (target <= ${TARGET}; control drift ${driftFirst.toFixed(2)}, load-corrected ${ratioFirstCorrected.toFixed(2)})`,
  );
  console.log(`audit deep pages (limit ${LIMIT}, cursor), 10k rows: ${fmt(figures.deep_page_10k)}`);
  console.log(
    `audit deep pages (limit ${LIMIT}, cursor), 1M rows:  ${fmt(figures.deep_page_1m)}  ratio 1M/10k ${ratioDeep.toFixed(2)} (target <= ${TARGET}; control drift ${driftDeep.toFixed(2)}, load-corrected ${ratioDeepCorrected.toFixed(2)})`,
  );
  console.log(
    `listRecords plan at 1M rows (cursor 900k deep): ${planOk ? 'Index Scan on records_org_keyset_idx' : 'NOT an index-only keyset scan'}, execution ${planMs} ms`,
  );
  console.log(
    plan
      .split('\n')
      .map((l) => `    ${l}`)
      .join('\n'),
  );
  console.log(`audit paging: ${pass ? 'PASS' : 'FAIL'}`);

  const rows = [
    {
      scenario: `Audit paging, first page (limit ${LIMIT})`,
      measured: `${fmt(figures.first_page_1m)} at ${orgRows} rows vs ${fmt(figures.first_page_10k)} at ${SMALL}: ratio ${ratioFirst.toFixed(2)} (load-corrected ${ratioFirstCorrected.toFixed(2)})`,
      target: `ratio <= ${TARGET}`,
      pass: ratioFirst <= TARGET,
    },
    {
      scenario: `Audit paging, deep pages by cursor (limit ${LIMIT})`,
      measured: `${fmt(figures.deep_page_1m)} at ${orgRows} rows vs ${fmt(figures.deep_page_10k)} at ${SMALL}: ratio ${ratioDeep.toFixed(2)} (load-corrected ${ratioDeepCorrected.toFixed(2)}); plan ${planOk ? 'Index Scan on records_org_keyset_idx' : 'not an index keyset scan'}`,
      target: `ratio <= ${TARGET}, index scan`,
      pass: ratioDeep <= TARGET && planOk,
    },
  ];
  saveResult('audit-paging', {
    rows,
    scenario: 'audit-paging',
    target: `GET /v1/audit page time at ${LARGE} rows within ${Math.round((TARGET - 1) * 100)}% of the time at ${SMALL} rows; plan is an Index Scan on records_org_keyset_idx`,
    rows_small: SMALL,
    rows_large: orgRows,
    page_limit: LIMIT,
    pages_per_figure: PAGES,
    ...figures,
    ratio_first_page: +ratioFirst.toFixed(3),
    ratio_deep_page: +ratioDeep.toFixed(3),
    control_drift_first_page: +driftFirst.toFixed(3),
    control_drift_deep_page: +driftDeep.toFixed(3),
    ratio_first_page_load_corrected: +ratioFirstCorrected.toFixed(3),
    ratio_deep_page_load_corrected: +ratioDeepCorrected.toFixed(3),
    plan_index_scan: planOk,
    plan_execution_ms: planMs,
    plan,
    statement: stmt.sql,
    pass,
  });
  if (!planOk) {
    console.error('FAIL: the audit page query does not use an Index Scan on records_org_keyset_idx');
    exitCode = 1;
  }
} finally {
  await c.end().catch(() => undefined);
  await cluster.stop();
}
process.exit(exitCode);
