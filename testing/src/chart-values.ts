import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse, parseAllDocuments } from 'yaml';

/** A chart's values, read field by field by the chart tests. */
export type ChartValues = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any -- YAML of the chart's own schema

/** charts/lab */
const labChartDir = join(__dirname, '..', '..', 'charts', 'lab');

const isObject = (x: unknown): x is ChartValues => !!x && typeof x === 'object' && !Array.isArray(x);

/** helm's merge of values files: maps merge key by key, anything else (lists too) is replaced. */
function mergeValues(base: ChartValues, over: ChartValues): ChartValues {
  const out: ChartValues = { ...base };
  for (const [k, v] of Object.entries(over) as [string, unknown][]) {
    const here: unknown = out[k];
    out[k] = isObject(v) && isObject(here) ? mergeValues(here, v) : v;
  }
  return out;
}

/** A chart's values.yaml with `files` (relative to the chart, or absolute) over it, as helm reads them. */
export function chartValues(files: string[] = [], dir = labChartDir): ChartValues {
  return ['values.yaml', ...files]
    .map((f) => parse(readFileSync(f.startsWith('/') ? f : join(dir, f), 'utf8')) as ChartValues)
    .reduce<ChartValues>((acc, v) => mergeValues(acc, v), {});
}

/** A rendered Kubernetes object, read field by field by the chart tests. */
export interface RenderedObject extends ChartValues {
  apiVersion: string;
  kind: string;
  metadata: { name: string; labels?: Record<string, string>; annotations?: Record<string, string> };
}

/** The objects of `helm template` output; a document YAML cannot read fails the test. */
export function renderedObjects(text: string): RenderedObject[] {
  return parseAllDocuments(text)
    .map((d) => {
      if (d.errors.length) throw d.errors[0]!;
      return d.toJS() as RenderedObject | null;
    })
    .filter((d): d is RenderedObject => !!d);
}
