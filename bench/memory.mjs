// Memory of the standalone process. services/standalone/dist/main.js is started as
// `npm start` starts it (its script, with the environment it sets), fully embedded
// (no DATABASE_URL, AMQP_URL or REDIS_URL: PGlite and the in-process bus) in a fresh
// temporary data directory. After readiness it idles 10 s and answers a few warm-up
// requests; its RSS (VmRSS of /proc/<pid>/status) is sampled for 2 s and the maximum
// is the idle figure (target < 400 MB). Then an org with module analytics_qc, a member, an API key and
// a device are set up through the management API and the public API, the process
// settles again (pre-upload baseline), and a generated 50 MiB .mzML file (written
// to a temp file first, streamed from disk as multipart/form-data) is uploaded to
// POST /v1/results/upload while the server's RSS is sampled every 50 ms. The figure
// is the peak RSS during the upload minus the idle figure (target < 30 MiB), also
// shown against the pre-upload baseline. The upload is done twice: the first one
// also pays for code paths used for the first time, the second shows the steady
// state. Each upload's answer is checked for the right size and sha256. The
// figures, with a row per target for bench/report.mjs, go to bench/results/memory.json.
import { createHash, randomBytes } from 'node:crypto';
import { createReadStream, createWriteStream } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { api } from './cluster.mjs';
import { saveResult } from './results.mjs';
import { rssBytes, startStandalone } from './standalone.mjs';

const MiB = 1024 * 1024;
const FILE_BYTES = 50 * MiB;
const IDLE_SECONDS = Number(process.env.BENCH_IDLE_SECONDS ?? 10);
const TARGET_IDLE_MB = 400;
const TARGET_GROWTH_MIB = 30;

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function sampleMax(pid, ms, every = 100) {
  let max = 0;
  for (const until = Date.now() + ms; Date.now() < until; await sleep(every)) max = Math.max(max, await rssBytes(pid));
  return max;
}

/** Samples RSS every 50 ms until stopped; resolves the peak. */
function sampler(pid) {
  let peak = 0;
  let samples = 0;
  let running = true;
  const done = (async () => {
    while (running) {
      peak = Math.max(peak, await rssBytes(pid).catch(() => 0));
      samples++;
      await sleep(50);
    }
    return { peak, samples };
  })();
  return { stop: () => ((running = false), done) };
}

/** A synthetic mzML document of exactly `size` bytes: spectra with base64 peak arrays. */
async function writeMzml(path, size) {
  const head = Buffer.from(
    '<?xml version="1.0" encoding="utf-8"?>\n<indexedmzML xmlns="http://psi.hupo.org/ms/mzml">\n<mzML version="1.1.0">\n<run id="bench"><spectrumList count="0">\n',
  );
  const tail = Buffer.from('</spectrumList></run>\n</mzML>\n</indexedmzML>\n');
  const out = createWriteStream(path);
  const write = (b) => (out.write(b) ? undefined : new Promise((r) => out.once('drain', r)));
  let left = size - head.length - tail.length;
  await write(head);
  for (let i = 0; left > 0; i++) {
    const spectrum = Buffer.from(
      `<spectrum index="${i}" id="scan=${i + 1}" defaultArrayLength="512"><binaryDataArrayList count="1"><binaryDataArray>` +
        `<binary>${randomBytes(3072).toString('base64')}</binary></binaryDataArray></binaryDataArrayList></spectrum>\n`,
    );
    const piece = spectrum.length <= left ? spectrum : Buffer.alloc(left, 0x20);
    await write(piece);
    left -= piece.length;
  }
  await write(tail);
  await new Promise((r, j) => out.end((e) => (e ? j(e) : r())));
}

async function sha256File(path) {
  const h = createHash('sha256');
  for await (const b of createReadStream(path)) h.update(b);
  return h.digest('hex');
}

/** multipart/form-data with parts device_id and file, the file piped from disk. */
function upload(base, token, deviceId, path, size) {
  const boundary = `----labbench${randomBytes(8).toString('hex')}`;
  const head = Buffer.from(
    `--${boundary}\r\nContent-Disposition: form-data; name="device_id"\r\n\r\n${deviceId}\r\n` +
      `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="run.mzML"\r\nContent-Type: application/octet-stream\r\n\r\n`,
  );
  const tail = Buffer.from(`\r\n--${boundary}--\r\n`);
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    const req = request(
      new URL('/v1/results/upload', base),
      {
        method: 'POST',
        headers: {
          authorization: `Bearer ${token}`,
          'content-type': `multipart/form-data; boundary=${boundary}`,
          'content-length': head.length + size + tail.length,
        },
      },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (d) => (text += d));
        res.on('end', () => resolve({ status: res.statusCode, body: text ? JSON.parse(text) : undefined, ms: performance.now() - t0 }));
      },
    );
    req.on('error', reject);
    req.write(head);
    const file = createReadStream(path);
    file.on('error', reject);
    file.on('end', () => req.end(tail));
    file.pipe(req, { end: false });
  });
}

const work = await mkdtemp(join(tmpdir(), 'lab-bench-memory-'));
let server;
let exitCode = 0;
try {
  const mzml = join(work, 'run.mzML');
  await writeMzml(mzml, FILE_BYTES);
  const sha256 = await sha256File(mzml);

  // fully embedded, as `npm start` runs it: PGlite, the in-process bus, in-memory rate limits
  server = await startStandalone(join(work, 'data'));
  const { url: base, operatorToken, startupMs } = server;
  const child = { pid: server.pid };

  await sleep(IDLE_SECONDS * 1000);
  for (let i = 0; i < 5; i++) {
    await fetch(`${base}/v1/health`).then((r) => r.text());
    await fetch(`${base}/admin/v1/orgs/${randomBytes(4).toString('hex')}`, { headers: { authorization: `Bearer ${operatorToken}` } }).then((r) => r.text());
  }
  await sleep(1000);
  const idle = await sampleMax(child.pid, 2000);

  // org with analytics_qc (devices and raw uploads), an admin member, a key acting as them, a device
  const org = (
    await api(base, 'POST', '/admin/v1/orgs', operatorToken, {
      name: 'bench',
      modules: ['analytics_qc'],
      rate_limit: { per_minute: 100_000, per_hour: 100_000 },
    })
  ).data;
  const user = (await api(base, 'POST', '/admin/v1/users', operatorToken, { email: `bench-${randomBytes(4).toString('hex')}@example.org` })).data;
  await api(base, 'PUT', `/admin/v1/orgs/${org.id}/members/${user.id}`, operatorToken, { role: 'admin' });
  const token = (await api(base, 'POST', `/admin/v1/orgs/${org.id}/api-keys`, operatorToken, { name: 'bench', scopes: ['read', 'write'], user_id: user.id }))
    .data.token;
  const device = (await api(base, 'POST', '/v1/devices', token, { name: 'Mass spectrometer', identifier: 'ms-bench-1' })).data;
  await sleep(2000);
  const preUpload = await sampleMax(child.pid, 1000);

  const uploads = [];
  for (const run of ['first', 'second']) {
    const before = await sampleMax(child.pid, 1000);
    const s = sampler(child.pid);
    const r = await upload(base, token, device.id, mzml, FILE_BYTES);
    await sleep(500); // the answer may come before the last buffers are let go
    const { peak, samples } = await s.stop();
    if (r.status !== 201) throw new Error(`upload ${run} -> ${r.status} ${JSON.stringify(r.body)}`);
    const raw = r.body.data.raw_file;
    if (raw.size !== FILE_BYTES || raw.sha256 !== sha256)
      throw new Error(`upload ${run} stored ${raw.size} bytes, sha256 ${raw.sha256}, expected ${FILE_BYTES} / ${sha256}`);
    await sleep(2000);
    const after = await sampleMax(child.pid, 1000);
    uploads.push({ run, ms: Math.round(r.ms), samples, rss_before: before, rss_peak: peak, rss_after: after });
  }

  const mb = (b) => b / 1e6;
  const mib = (b) => b / MiB;
  const idlePass = mb(idle) < TARGET_IDLE_MB;
  const figures = uploads.map((u) => ({
    ...u,
    growth_over_idle_mib: +mib(u.rss_peak - idle).toFixed(1),
    growth_over_before_mib: +mib(u.rss_peak - u.rss_before).toFixed(1),
    pass: mib(u.rss_peak - idle) < TARGET_GROWTH_MIB,
  }));
  const pass = idlePass && figures.every((f) => f.pass);

  console.log(`standalone startup to ready: ${(startupMs / 1000).toFixed(1)} s`);
  console.log(`standalone idle RSS: ${mb(idle).toFixed(0)} MB (${mib(idle).toFixed(0)} MiB; target < ${TARGET_IDLE_MB} MB) ${idlePass ? 'PASS' : 'FAIL'}`);
  console.log(`after setting up an org, key and device: ${mb(preUpload).toFixed(0)} MB`);
  for (const f of figures) {
    console.log(
      `50 MiB mzML upload (${f.run}): peak RSS ${mb(f.rss_peak).toFixed(0)} MB, +${f.growth_over_idle_mib} MiB over idle (target < ${TARGET_GROWTH_MIB} MiB) ${f.pass ? 'PASS' : 'FAIL'}; ` +
        `+${f.growth_over_before_mib} MiB over the RSS just before; ${f.ms} ms; ${f.samples} samples; after: ${mb(f.rss_after).toFixed(0)} MB`,
    );
  }
  console.log(`memory: ${pass ? 'PASS' : 'FAIL'}`);

  const rows = [
    {
      scenario: 'Memory: standalone idle RSS',
      measured: `${mb(idle).toFixed(0)} MB (ready after ${(startupMs / 1000).toFixed(1)} s)`,
      target: `< ${TARGET_IDLE_MB} MB`,
      pass: idlePass,
    },
    ...figures.map((f) => ({
      scenario: `Memory: 50 MiB mzML upload (${f.run})`,
      measured: `RSS +${f.growth_over_idle_mib} MiB over idle (+${f.growth_over_before_mib} MiB over the RSS just before; peak ${mb(f.rss_peak).toFixed(0)} MB; ${f.ms} ms)`,
      target: `< ${TARGET_GROWTH_MIB} MiB over idle`,
      pass: f.pass,
    })),
  ];
  saveResult('memory', {
    scenario: 'memory',
    target: `standalone idles under ${TARGET_IDLE_MB} MB RSS; a 50 MiB mzML upload grows RSS by less than ${TARGET_GROWTH_MIB} MiB`,
    file_bytes: FILE_BYTES,
    startup_ms: Math.round(startupMs),
    idle_rss_bytes: idle,
    idle_rss_mb: +mb(idle).toFixed(1),
    idle_pass: idlePass,
    pre_upload_rss_bytes: preUpload,
    uploads: figures,
    upload_growth_pass: figures.every((f) => f.pass),
    pass,
    rows,
  });

  const stopped = await server.stop();
  if (!stopped) {
    console.error('standalone did not stop within 20 s of SIGTERM');
    exitCode = 1;
  }
} finally {
  await server?.stop();
  await rm(work, { recursive: true, force: true });
}
process.exit(exitCode);
