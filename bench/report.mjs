// Prints the latest figures of every scenario against its target, from
// bench/results/*.json (each scenario script writes its own file), as a
// Markdown table ready for docs/benchmarks.md. Exits 0 whatever the outcome:
// a missed target is a figure to read, not a broken build.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { resultsDir } from './results.mjs';

const ORDER = [
  'read-write',
  'mixed',
  'scale-out',
  'ingest',
  'ingest-breach-1-in-3',
  'ingest-breach-none',
  'webhooks',
  'audit-paging',
  'overhead',
  'memory',
  'embedded',
  'outbox-drain',
];
const files = existsSync(resultsDir) ? readdirSync(resultsDir).filter((f) => f.endsWith('.json')) : [];
const named = files
  .map((f) => ({ name: f.replace(/\.json$/, ''), data: JSON.parse(readFileSync(join(resultsDir, f), 'utf8')) }))
  .filter((r) => Array.isArray(r.data.rows))
  .sort((a, b) => (ORDER.indexOf(a.name) + 1 || 99) - (ORDER.indexOf(b.name) + 1 || 99));

if (!named.length) {
  console.log('no results yet: run npm run bench');
  process.exit(0);
}
const lines = ['| Scenario | Measured | Target | Met |', '|---|---|---|---|'];
for (const { data } of named) {
  for (const row of data.rows) lines.push(`| ${row.scenario} | ${row.measured} | ${row.target} | ${row.pass === null ? 'n/a' : row.pass ? 'yes' : 'no'} |`);
}
const metas = named.map(
  ({ name, data }) => `${name}: ${data.meta?.date ?? '?'} commit ${data.meta?.commit ?? '?'} load ${data.meta?.load_average_1m?.toFixed?.(2) ?? '?'}`,
);
const m = named[0].data.meta ?? {};
console.log(`\nMachine: ${m.cpus ?? '?'}, ${m.memory_gib ?? '?'} GiB, Node.js ${m.node ?? '?'}`);
for (const line of metas) console.log(`  ${line}`);
console.log(`\n${lines.join('\n')}`);
