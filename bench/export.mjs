// How long an export job takes over a large table (a development aid, not a scenario
// of `npm run bench`): BENCH_EXPORT_ROWS samples (default 100,000) are seeded
// straight into notebook.samples of one organisation, beside as many of another
// organisation (the same table holds every tenant), then one org_data_export runs
// through the whole stack (jobs reading every table page by page over gRPC) and the
// seconds from submission to `succeeded` are printed, with the ZIP's row count.
// Then a client reads the same list whole through GET /v1/samples, 500 per page,
// once by offset and once by keyset (since_created_at, then next_cursor), and the
// first page of 50 (with its total) is timed, median of 21 requests.
// BENCH_EXPORT_STEPS picks some of export,walk,page (default all).
// To compare two commits, run this script (as of the newer one) against both trees.
import pg from 'pg';
import { api, seedOrg, startCluster } from './cluster.mjs';

const ROWS = Number(process.env.BENCH_EXPORT_ROWS ?? 100_000);
const STEPS = (process.env.BENCH_EXPORT_STEPS ?? 'export,walk,page').split(',');

async function seedSamples(url, orgId, n) {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    // ids and times increase together, as the service writes them (UUIDv7, now())
    await c.query(
      `insert into notebook.samples (id, org_id, name, type, status, metadata, created_at, updated_at)
       select (lpad(to_hex((extract(epoch from t) * 1000)::bigint), 12, '0') || '7' || substr(h, 1, 3) || '8' || substr(h, 4, 15))::uuid,
              $1::uuid, 'sample ' || g, 'blood', 'registered', '{"tube": "EDTA"}', t, t
       from generate_series(1, $2::int) g,
            lateral (select timestamptz '2026-01-01' + g * interval '1 second' as t, md5($1 || g::text) as h) x`,
      [orgId, n],
    );
    await c.query('vacuum analyze notebook.samples');
  } finally {
    await c.end();
  }
}

const cluster = await startCluster(['identity', 'notebook', 'audit', 'inventory', 'equipment', 'jobs']);
try {
  const { org, token } = await seedOrg(cluster.url, cluster.operatorToken);
  const other = await seedOrg(cluster.url, cluster.operatorToken);
  await seedSamples(cluster.db.url, org.id, ROWS);
  await seedSamples(cluster.db.url, other.org.id, ROWS);
  if (STEPS.includes('export')) await exportJob(token);
  if (STEPS.includes('walk')) await walks(token);
  if (STEPS.includes('page')) await firstPage(token);
} finally {
  await cluster.stop();
}

async function exportJob(token) {
  const started = Date.now();
  const job = (await api(cluster.url, 'POST', '/v1/jobs', token, { job_type: 'org_data_export', input: {} })).data;
  let done;
  for (;;) {
    done = (await api(cluster.url, 'GET', `/v1/jobs/${job.id}`, token)).data;
    if (['succeeded', 'failed', 'dead', 'cancelled'].includes(done.status)) break;
    await new Promise((r) => setTimeout(r, 250));
  }
  const seconds = (Date.now() - started) / 1000;
  console.log(
    `org_data_export of ${ROWS} samples: ${done.status} in ${seconds.toFixed(1)} s (${done.result_meta?.rows ?? '?'} rows, ${(ROWS / seconds).toFixed(0)} samples/s)`,
  );
  if (done.status !== 'succeeded') process.exitCode = 1;
}

async function walks(token) {
  const walk = async (first, next) => {
    const t0 = Date.now();
    let n = 0;
    for (let path = first; path;) {
      const r = await api(cluster.url, 'GET', path, token);
      n += r.data.length;
      path = next(r);
    }
    return { n, seconds: (Date.now() - t0) / 1000 };
  };
  const byOffset = await walk('/v1/samples?limit=500&order=asc', (r) =>
    r.pagination.offset + r.pagination.limit < r.pagination.total
      ? `/v1/samples?limit=500&order=asc&offset=${r.pagination.offset + r.pagination.limit}`
      : undefined,
  );
  const byKeyset = await walk('/v1/samples?limit=500&since_created_at=1970-01-01T00:00:00Z', (r) => {
    const c = r.pagination.next_cursor;
    return c ? `/v1/samples?limit=500&since_created_at=${encodeURIComponent(c.since_created_at)}&since_id=${c.since_id}` : undefined;
  });
  for (const [how, w] of [
    ['offset', byOffset],
    ['keyset', byKeyset],
  ]) {
    console.log(`GET /v1/samples whole, 500 per page, by ${how}: ${w.n} records in ${w.seconds.toFixed(1)} s`);
  }
}

async function firstPage(token) {
  const times = [];
  for (let i = 0; i < 21; i++) {
    const t0 = performance.now();
    const r = await api(cluster.url, 'GET', '/v1/samples?limit=50', token);
    times.push(performance.now() - t0);
    if (r.pagination.total !== ROWS) throw new Error(`total ${r.pagination.total}`);
  }
  times.sort((a, b) => a - b);
  console.log(
    `GET /v1/samples?limit=50 with its total over ${ROWS} samples: median ${times[10].toFixed(1)} ms (${times[0].toFixed(1)}-${times[20].toFixed(1)})`,
  );
}
