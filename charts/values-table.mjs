// The values table of charts/lab/README.md, generated from charts/lab/values.schema.json
// (keys, types, descriptions) and charts/lab/values.yaml (defaults).
//
//   node charts/values-table.mjs          rewrites the table in the README (npm run chart:docs)
//   node charts/values-table.mjs --check  exits 1 when the README's table is not what it generates
//   node charts/values-table.mjs --print  prints the table
import { readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parse } from 'yaml';

const chart = join(dirname(fileURLToPath(import.meta.url)), 'lab');
const README = join(chart, 'README.md');
const BEGIN = '<!-- values-table:begin (npm run chart:docs) -->';
const END = '<!-- values-table:end -->';

const schema = JSON.parse(readFileSync(join(chart, 'values.schema.json'), 'utf8'));
const values = parse(readFileSync(join(chart, 'values.yaml'), 'utf8'));

/** The schema a local $ref (#/definitions/...) points to, merged with the referring node's own keywords. */
function resolve(node) {
  if (!node || typeof node !== 'object') return {};
  let out = node;
  while (out.$ref) {
    const target = out.$ref
      .replace(/^#\//, '')
      .split('/')
      .reduce((o, k) => o?.[k], schema);
    if (!target) throw new Error(`unresolved $ref ${out.$ref}`);
    const { $ref: _, ...rest } = out;
    out = { ...target, ...rest };
  }
  if (out.allOf)
    out = out.allOf.map(resolve).reduce((a, b) => ({ ...a, ...b, properties: { ...a.properties, ...b.properties } }), { ...out, allOf: undefined });
  return out;
}

function typeOf(node) {
  if ('const' in node) return `\`${JSON.stringify(node.const)}\``;
  if (node.enum) return node.enum.map((e) => `\`${JSON.stringify(e)}\``).join(' | ');
  if (node.anyOf) return node.anyOf.map((n) => typeOf(resolve(n))).join(' or ');
  if (Array.isArray(node.type)) return node.type.join(' or ');
  if (node.type === 'array' && node.items) return `${typeOf(resolve(node.items))}[]`;
  return node.type ?? 'object';
}

function get(obj, path) {
  return path.reduce((o, k) => (o && typeof o === 'object' ? o[k] : undefined), obj);
}

function defaultOf(path) {
  const v = get(values, path);
  if (v === undefined) return '';
  const text = JSON.stringify(v);
  return `\`${text.length > 60 ? `${text.slice(0, 57)}...` : text}\``;
}

const cell = (s) =>
  String(s ?? '')
    .replace(/\|/g, '\\|')
    .replace(/\n/g, ' ');

// Kubernetes objects given whole (a probe, resources): one row each
const LEAVES = new Set(['#/definitions/probe', '#/definitions/resources']);

/** Rows of one schema node at a path: a leaf, or its properties in the schema's order. */
function rows(node, path, out, { defaults = true } = {}) {
  const n = resolve(node);
  const props = n.properties && Object.keys(n.properties).length && n.type !== 'array' ? n.properties : undefined;
  const expand = props && !LEAVES.has(node.$ref) && !(path.length && n.description && isMapLike(n));
  if (!expand) {
    out.push([path.join('.'), typeOf(n), defaults ? defaultOf(path) : '', n.description ?? '']);
    return;
  }
  if (n.description && path.length) out.push([path.join('.'), typeOf(n), '', n.description]);
  for (const [k, child] of Object.entries(props)) rows(child, [...path, k], out, { defaults });
  // a map of entries each of one schema (services): its entries' keys once
  if (n.additionalProperties && typeof n.additionalProperties === 'object' && path[path.length - 1] === 'services') {
    rows(n.additionalProperties, [...path, '<name>'], out, { defaults: false });
  }
}

// objects whose few properties are better read as one value (selectors, a Kubernetes probe)
function isMapLike(n) {
  return n.additionalProperties !== false && n.additionalProperties !== undefined;
}

function valuesTable() {
  const out = [];
  for (const [k, child] of Object.entries(schema.properties)) {
    if (k === 'services') {
      out.push(['services', 'object', '', 'one entry per component (gateway, identity, notebook, ...); each entry:']);
      rows(schema.definitions.service, ['services', '<name>'], out, { defaults: false });
      continue;
    }
    rows(child, [k], out);
  }
  const lines = ['| Key | Type | Default | Description |', '| --- | --- | --- | --- |'];
  for (const [key, type, def, desc] of out) lines.push(`| \`${cell(key)}\` | ${cell(type)} | ${cell(def)} | ${cell(desc)} |`);
  return `${lines.join('\n')}\n`;
}

function section() {
  return `${BEGIN}\n\n${valuesTable()}\n${END}`;
}

function readmeWithTable(readme) {
  const a = readme.indexOf(BEGIN);
  const b = readme.indexOf(END);
  if (a < 0 || b < a) throw new Error(`${README} has no ${BEGIN} ... ${END} section`);
  return readme.slice(0, a) + section() + readme.slice(b + END.length);
}

const arg = process.argv[2];
if (arg === '--print') {
  process.stdout.write(valuesTable());
} else if (arg === '--check') {
  const readme = readFileSync(README, 'utf8');
  if (readmeWithTable(readme) !== readme) {
    process.stderr.write(`${README}: the values table is not what values.schema.json gives; run npm run chart:docs\n`);
    process.exit(1);
  }
} else {
  writeFileSync(README, readmeWithTable(readFileSync(README, 'utf8')));
}
