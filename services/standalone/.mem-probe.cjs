const { startStandalone, standaloneEnv } = require('/work/main/services/standalone/dist/standalone.js');
const { createLogger, loadConfig } = require('@lab/kit');
const fs = require('fs');
const mu = (l) => { const m = process.memoryUsage(); const r = fs.readFileSync('/proc/self/status','utf8'); console.log(l, JSON.stringify(Object.fromEntries(Object.entries(m).map(([k,v])=>[k,+(v/1048576).toFixed(0)]))), /VmRSS.*/.exec(r)[0], /RssAnon.*/.exec(r)[0]); };
function smaps() {
  const txt = fs.readFileSync('/proc/self/smaps', 'utf8').split('\n');
  const maps = []; let cur;
  for (const l of txt) {
    if (/^[0-9a-f]+-[0-9a-f]+ /.test(l)) { cur = { head: l, rss: 0 }; maps.push(cur); }
    else if (l.startsWith('Rss:')) cur.rss = +l.split(/\s+/)[1];
  }
  maps.sort((a,b)=>b.rss-a.rss);
  for (const m of maps.slice(0, 15)) { const [range] = m.head.split(' '); const [a,b]=range.split('-').map(x=>parseInt(x,16)); console.log((m.rss/1024).toFixed(1).padStart(7),'MiB rss of', ((b-a)/1048576).toFixed(0).padStart(6),'MiB', m.head.slice(range.length, 120)); }
}
(async () => {
  if (process.env.SB) require('@electric-sql/pglite').PGlite.defaultStartParams.push('-c', `shared_buffers=${process.env.SB}`);
  mu('start');
  const dir = process.argv[2];
  const cfg = loadConfig(standaloneEnv, { PORT: '0', HOST: '127.0.0.1', LAB_DATA_DIR: dir, LAB_OPERATOR_TOKEN: 'x'.repeat(32), METRICS_PORT: '0', LOG_LEVEL: 'warn' });
  const lab = await startStandalone(cfg, createLogger('lab', 'warn'));
  mu('ready');
  await new Promise(r => setTimeout(r, 10000));
  mu('idle10s');
  global.gc && global.gc();
  await new Promise(r => setTimeout(r, 1000));
  mu('idle+gc');
  if (process.env.SMAPS) smaps();
  await lab.stop();
  process.exit(0);
})();
