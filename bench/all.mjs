// npm run bench: every scenario in turn, each in its own process (a fresh
// cluster and database each), then the table of figures against targets.
// BENCH_SCENARIOS=read-write,ingest picks some; the other BENCH_* variables
// are read by the scenario scripts. A scenario is a script, or a script with
// variables of its own (the breach-heavy and breach-free ingest batches).
import { spawnSync } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const SCENARIOS = {
  'read-write': 'run.mjs',
  // GET by id and keyed POST paced together, as a LIMS at peak hours sends them
  mixed: 'mixed.mjs',
  'scale-out': 'scale-out.mjs',
  ingest: 'ingest.mjs',
  // a third of each batch's readings out of their limits: an environmental.breach event each
  'ingest-breaches': { script: 'ingest.mjs', env: { BENCH_BREACH_EVERY: '3' } },
  // none out of their limits: the insert path alone, no event
  'ingest-clean': { script: 'ingest.mjs', env: { BENCH_BREACH_EVERY: '0' } },
  webhooks: 'webhooks.mjs',
  'audit-paging': 'audit-paging.mjs',
  overhead: 'overhead.mjs',
  memory: 'memory.mjs',
  // npm start (PGlite) under GET and keyed POST, and its RSS after the load
  embedded: 'embedded.mjs',
  'outbox-drain': 'outbox-drain.mjs',
};
const chosen = process.env.BENCH_SCENARIOS?.split(',') ?? Object.keys(SCENARIOS);
let failed = 0;
for (const name of chosen) {
  const scenario = SCENARIOS[name];
  if (!scenario) {
    console.error(`unknown scenario ${name}; known: ${Object.keys(SCENARIOS).join(', ')}`);
    process.exit(2);
  }
  console.log(`\n## ${name}`);
  const { script, env } = typeof scenario === 'string' ? { script: scenario, env: {} } : scenario;
  const r = spawnSync(process.execPath, [join(here, script)], { stdio: 'inherit', env: { ...process.env, ...env } });
  if (r.status !== 0) {
    failed++;
    console.error(`scenario ${name} failed (exit ${r.status})`);
  }
}
spawnSync(process.execPath, [join(here, 'report.mjs')], { stdio: 'inherit' });
process.exit(failed ? 1 : 0);
