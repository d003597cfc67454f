import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseAllDocuments } from 'yaml';
import { helm } from '../helm.js';
import type { NetworkPolicy } from './network-policy.js';

/**
 * The rendered chart, as the pieces a kubelet and a CNI act on: workloads (their
 * pod templates), Services, the ConfigMap and the NetworkPolicies. Only the
 * fields the chart runner reads are typed.
 */

export interface Probe {
  httpGet?: { path?: string; port: number | string; scheme?: string };
  grpc?: { port: number; service?: string };
  tcpSocket?: { port: number | string };
  exec?: { command: string[] };
  initialDelaySeconds?: number;
  periodSeconds?: number;
  timeoutSeconds?: number;
  successThreshold?: number;
  failureThreshold?: number;
}

interface EnvVar {
  name: string;
  value?: string;
  valueFrom?: {
    secretKeyRef?: { name: string; key: string; optional?: boolean };
    configMapKeyRef?: { name: string; key: string; optional?: boolean };
    fieldRef?: { fieldPath: string };
  };
}

export interface Container {
  name: string;
  image: string;
  command?: string[];
  args?: string[];
  env?: EnvVar[];
  envFrom?: { configMapRef?: { name: string }; secretRef?: { name: string } }[];
  ports?: { name?: string; containerPort: number }[];
  livenessProbe?: Probe;
  readinessProbe?: Probe;
  startupProbe?: Probe;
  lifecycle?: { preStop?: { exec?: { command: string[] }; sleep?: { seconds: number } } };
  volumeMounts?: { name: string; mountPath: string; readOnly?: boolean }[];
  securityContext?: { readOnlyRootFilesystem?: boolean; runAsUser?: number; runAsGroup?: number };
}

interface PodSpec {
  containers: Container[];
  initContainers?: Container[];
  volumes?: { name: string; emptyDir?: object; persistentVolumeClaim?: { claimName: string } }[];
  securityContext?: { runAsUser?: number; runAsGroup?: number; fsGroup?: number };
  terminationGracePeriodSeconds?: number;
  serviceAccountName?: string;
}

/** Something that makes pods: a Deployment, a (hook) Job or a bare Pod. */
export interface Workload {
  kind: 'Deployment' | 'Job' | 'Pod';
  name: string;
  /** the pod template's labels */
  labels: Record<string, string>;
  annotations: Record<string, string>;
  spec: PodSpec;
  /** Deployment replicas (undefined with an HPA: its minReplicas) */
  replicas: number;
  /** helm hook kind (pre-install, test, ...) */
  hook?: string;
  hookWeight: number;
}

interface Service {
  name: string;
  selector: Record<string, string>;
  headless: boolean;
  ports: { name?: string; port: number; targetPort?: number | string }[];
}

export interface Manifests {
  namespace: string;
  workloads: Workload[];
  services: Service[];
  configMaps: Map<string, Record<string, string>>;
  networkPolicies: NetworkPolicy[];
  /** every rendered object, for assertions of a test's own */
  all: Record<string, unknown>[];
}

const root = join(__dirname, '..', '..', '..');
const chartDir = join(root, 'charts', 'lab');

export interface RenderOptions {
  /** the chart's folder; charts/lab unless given (a fixture of an older chart) */
  chartDir?: string;
  release: string;
  namespace: string;
  /** values files, relative to the chart's folder or absolute */
  valuesFiles?: string[];
  /** --set arguments */
  set?: string[];
  /** --set-string arguments */
  setString?: string[];
}

/** `helm template` of the chart; rejects with helm's message when it refuses to render. */
export async function renderChart(opts: RenderOptions): Promise<Manifests> {
  const dir = opts.chartDir ?? chartDir;
  const args = ['template', opts.release, dir, '--namespace', opts.namespace];
  for (const f of opts.valuesFiles ?? []) args.push('-f', f.startsWith('/') ? f : join(dir, f));
  for (const s of opts.set ?? []) args.push('--set', s);
  for (const s of opts.setString ?? []) args.push('--set-string', s);
  const out = await helm(args);
  if (out.code !== 0) throw new Error(`helm template failed: ${out.stderr}`);
  return parseManifests(out.stdout, opts.namespace);
}

/** A rendered object, as far as the runner reads it. */
interface Rendered {
  kind: string;
  metadata: { name: string; labels?: Record<string, string>; annotations?: Record<string, string> };
  data?: Record<string, string>;
  spec?: Partial<PodSpec> & {
    replicas?: number;
    minReplicas?: number;
    scaleTargetRef?: { name: string };
    template?: { metadata?: { labels?: Record<string, string>; annotations?: Record<string, string> }; spec: PodSpec };
    selector?: Record<string, string>;
    clusterIP?: string;
    ports?: Service['ports'];
  };
}

function parseManifests(text: string, namespace: string): Manifests {
  const all = parseAllDocuments(text)
    .map((d) => d.toJS() as Rendered | null)
    .filter((o): o is Rendered => Boolean(o?.kind));
  const hpaMin = new Map<string, number>();
  for (const o of all) if (o.kind === 'HorizontalPodAutoscaler' && o.spec?.scaleTargetRef) hpaMin.set(o.spec.scaleTargetRef.name, o.spec.minReplicas ?? 1);
  const workloads: Workload[] = [];
  for (const o of all) {
    const hook = o.metadata.annotations?.['helm.sh/hook'];
    const hookWeight = Number(o.metadata.annotations?.['helm.sh/hook-weight'] ?? 0);
    if ((o.kind === 'Deployment' || o.kind === 'Job') && o.spec?.template) {
      const t = o.spec.template;
      workloads.push({
        kind: o.kind,
        name: o.metadata.name,
        labels: t.metadata?.labels ?? {},
        annotations: t.metadata?.annotations ?? {},
        spec: t.spec,
        replicas: o.kind === 'Job' ? 1 : (o.spec.replicas ?? hpaMin.get(o.metadata.name) ?? 1),
        hook,
        hookWeight,
      });
    } else if (o.kind === 'Pod' && o.spec?.containers) {
      const spec = o.spec as PodSpec;
      workloads.push({
        kind: 'Pod',
        name: o.metadata.name,
        labels: o.metadata.labels ?? {},
        annotations: o.metadata.annotations ?? {},
        spec,
        replicas: 1,
        hook,
        hookWeight,
      });
    }
  }
  const services: Service[] = all
    .filter((o) => o.kind === 'Service')
    .map((o) => ({ name: o.metadata.name, selector: o.spec?.selector ?? {}, headless: o.spec?.clusterIP === 'None', ports: o.spec?.ports ?? [] }));
  const configMaps = new Map<string, Record<string, string>>();
  for (const o of all) if (o.kind === 'ConfigMap') configMaps.set(o.metadata.name, o.data ?? {});
  const networkPolicies = all.filter((o) => o.kind === 'NetworkPolicy') as unknown as NetworkPolicy[];
  return { namespace, workloads, services, configMaps, networkPolicies, all: all as unknown as Record<string, unknown>[] };
}

/** The image's environment, user and default command, read from docker/Dockerfile's last stage. */
export interface ImageConfig {
  env: Record<string, string>;
  cmd: string[];
  user?: { uid: number; gid: number };
}

export function imageConfig(): ImageConfig {
  const lines = readFileSync(join(root, 'docker', 'Dockerfile'), 'utf8').split('\n');
  const last =
    lines
      .map((l, i) => (/^FROM\s/i.test(l) ? i : -1))
      .filter((i) => i >= 0)
      .pop() ?? 0;
  const env: Record<string, string> = {};
  let cmd: string[] = [];
  let user: ImageConfig['user'];
  for (const line of lines.slice(last)) {
    const m = /^(ENV|CMD|USER)\s+(.*)$/.exec(line.trim());
    if (!m) continue;
    if (m[1] === 'ENV') {
      for (const pair of m[2]!.match(/[A-Za-z_][A-Za-z0-9_]*=("[^"]*"|\S+)/g) ?? []) {
        const eq = pair.indexOf('=');
        env[pair.slice(0, eq)] = pair.slice(eq + 1).replace(/^"|"$/g, '');
      }
    } else if (m[1] === 'CMD') {
      cmd = JSON.parse(m[2]!) as string[];
    } else {
      const [uid, gid] = m[2]!.split(':').map(Number);
      user = { uid: uid!, gid: gid ?? uid! };
    }
  }
  return { env, cmd, user };
}
