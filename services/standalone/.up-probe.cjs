const { startStandalone, standaloneEnv } = require('/work/main/services/standalone/dist/standalone.js');
const { prepareEmbeddedDataDir } = require('/work/main/services/standalone/dist/embedded-data-dir.js');
const { createLogger, loadConfig } = require('@lab/kit');
const fs = require('fs'); const { execFile } = require('child_process');
const MiB = 1048576;
const snap = () => { const m = process.memoryUsage(); return { rss: m.rss/MiB, heap: m.heapTotal/MiB, used: m.heapUsed/MiB, ext: m.external/MiB, ab: m.arrayBuffers/MiB }; };
const fmt = (o) => Object.entries(o).map(([k,v])=>`${k}=${v.toFixed(0)}`).join(' ');
(async () => {
  const dir = process.argv[2]; const file = process.argv[3];
  const log = createLogger('lab', 'warn');
  await prepareEmbeddedDataDir(dir, log);
  const cfg = loadConfig(standaloneEnv, { PORT: '0', HOST: '127.0.0.1', LAB_DATA_DIR: dir, LAB_OPERATOR_TOKEN: 'x'.repeat(32), METRICS_PORT: '0', LOG_LEVEL: 'warn' });
  const lab = await startStandalone(cfg, log);
  const op = 'x'.repeat(32);
  const api = async (m, p, t, b) => (await (await fetch(lab.url + p, { method: m, headers: { authorization: 'Bearer ' + t, 'content-type': 'application/json' }, body: JSON.stringify(b) })).json()).data;
  const org = await api('POST', '/admin/v1/orgs', op, { name: 'p', modules: ['analytics_qc'] });
  const user = await api('POST', '/admin/v1/users', op, { email: `p${Date.now()}@example.org` });
  await api('PUT', `/admin/v1/orgs/${org.id}/members/${user.id}`, op, { role: 'admin' });
  const token = (await api('POST', `/admin/v1/orgs/${org.id}/api-keys`, op, { name: 'k', scopes: ['read', 'write'], user_id: user.id })).token;
  const dev = await api('POST', '/v1/devices', token, { name: 'MS', identifier: 'ms-1' });
  await new Promise(r => setTimeout(r, 3000));
  for (let run = 0; run < 2; run++) {
    const base = snap(); console.log('before', fmt(base));
    const peak = { rss: 0, heap: 0, used: 0, ext: 0, ab: 0 };
    const t = setInterval(() => { if (process.env.GCP && global.gc) global.gc({ type: "minor" }); if (process.env.GCF) global.gc(); const s = snap(); for (const k in s) peak[k] = Math.max(peak[k], s[k]); }, 20);
    const out = await new Promise((res, rej) => execFile('curl', ['-s', '-H', 'authorization: Bearer ' + token, '-F', 'device_id=' + dev.id, '-F', 'file=@' + file + ';filename=run.mzML', lab.url + '/v1/results/upload'], (e, so) => e ? rej(e) : res(so)));
    clearInterval(t);
    console.log('peak  ', fmt(peak), out.slice(0, 80));
    await new Promise(r => setTimeout(r, 2000));
    console.log('after ', fmt(snap()));
  }
  await lab.stop(); process.exit(0);
})();
