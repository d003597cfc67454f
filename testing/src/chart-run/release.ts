import { spawn, type ChildProcess } from 'node:child_process';
import { randomInt } from 'node:crypto';
import { chmodSync, chownSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { connectionVerdict, selects, type Endpoint, type Verdict } from './network-policy.js';
import { imageConfig, renderChart, type Container, type Manifests, type Probe, type RenderOptions, type Workload } from './manifests.js';
import { probeOnce } from './probes.js';
import { ClusterDns } from './cluster-dns.js';

/**
 * A release of the chart run the way a cluster runs it, on this machine: every
 * rendered pod a process started from its container's command (or the image's)
 * with exactly its rendered environment, as the image's user, on a read-only
 * root filesystem with its emptyDir volumes, on a loopback address of its own
 * (127.x.y.z, bound through HOST / GRPC_HOST / METRICS_HOST, the one thing
 * changed), resolving the release's Service names to the ready pods behind them
 * as the cluster's DNS does (a DNS server of the run that /etc/resolv.conf names,
 * and the same names in a hosts file, both bind-mounted in the process's own
 * mount namespace). The kubelet's startup, readiness and liveness probes run on
 * their ports, paths, periods and thresholds; every outbound connection of every
 * process is recorded and judged against the rendered NetworkPolicies.
 *
 * Needs root (mount namespaces, binding port 80, dropping to the image's user):
 * CI runs as root.
 */

const root = join(__dirname, '..', '..', '..');
const PRELOAD = join('testing', 'src', 'chart-run', 'record-connections.cjs');
const TAIL = 16_000;

/** An address outside the release, as the processes reach it and as the cluster would see it. */
export interface External {
  label: string;
  /** what the processes connect to on this machine */
  host: string;
  port: number;
  /** where it sits for the policies: its address and port in the cluster's network, and its labels if it is a pod */
  as: { ip: string; port: number; pod?: Endpoint['pod'] };
}

export interface ReleaseOptions extends RenderOptions {
  /** the Secrets the chart reads, by name: their data */
  secrets: Record<string, Record<string, string>>;
  externals: External[];
  /** host names the pods resolve besides the release's Services (a collector's, a receiver's) */
  hosts?: Record<string, string>;
  /** at most this many pods per Deployment: the policies and probes are the same for every replica */
  maxPodsPerDeployment?: number;
  /** how long every pod may take to be Ready */
  readyTimeoutMs?: number;
}

export interface Connection {
  pod: string;
  to: string;
  port: number;
  verdict: Verdict;
}

type Phase = 'pending' | 'running' | 'ready' | 'succeeded' | 'failed' | 'killed';

export class RunPod {
  child?: ChildProcess;
  phase: Phase = 'pending';
  ready = false;
  tail = '';
  readonly problems: string[] = [];
  /** the last probe that failed, and why */
  lastProbeFailure?: string;
  private stopped = false;
  private timers: NodeJS.Timeout[] = [];
  readonly connectionLog: string;

  constructor(
    readonly name: string,
    readonly workload: Workload,
    readonly ip: string,
    readonly dir: string,
    readonly namespace: string,
  ) {
    this.connectionLog = join(dir, 'connections.jsonl');
  }

  get container(): Container {
    return this.workload.spec.containers[0]!;
  }

  get endpoint(): Endpoint {
    const namedPorts = Object.fromEntries((this.container.ports ?? []).filter((p) => p.name).map((p) => [p.name!, p.containerPort]));
    return { ip: this.ip, pod: { namespace: this.namespace, labels: this.workload.labels, namedPorts } };
  }

  /** The outbound connections recorded so far. */
  connections(): { ip: string; port: number }[] {
    if (!existsSync(this.connectionLog)) return [];
    return readFileSync(this.connectionLog, 'utf8')
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l) as { ip: string; port: number });
  }

  schedule(fn: () => void, ms: number): void {
    if (!this.stopped) this.timers.push(setTimeout(fn, ms));
  }

  async stop(signal: NodeJS.Signals = 'SIGTERM', graceMs = 10_000): Promise<void> {
    this.stopped = true;
    for (const t of this.timers) clearTimeout(t);
    const child = this.child;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const gone = new Promise<void>((r) => child.once('exit', () => r()));
    child.kill(signal);
    const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
    await gone;
    clearTimeout(timer);
  }

  get isStopped(): boolean {
    return this.stopped;
  }
}

export class ChartRelease {
  readonly pods: RunPod[] = [];
  private readonly image = imageConfig();
  private readonly dir: string;
  private readonly hostsFile: string;
  private readonly resolvFile: string;
  /** where each pod sees the repository (the image's /app) */
  private readonly appDir: string;
  private readonly ipBase = `127.${randomInt(100, 250)}`;
  private nextIp = 1;

  private constructor(
    readonly manifests: Manifests,
    private readonly opts: ReleaseOptions,
  ) {
    // not under /tmp: every pod gets an emptyDir of its own there
    mkdirSync('/var/tmp', { recursive: true });
    this.dir = mkdtempSync('/var/tmp/lab-chart-run-');
    chmodSync(this.dir, 0o755);
    this.hostsFile = join(this.dir, 'hosts');
    this.appDir = join(this.dir, 'app');
    mkdirSync(this.appDir);
    this.resolvFile = join(this.dir, 'resolv.conf');
    writeFileSync(this.resolvFile, `nameserver ${this.dnsAddress}\noptions timeout:1 attempts:2\n`);
    this.writeHosts();
  }

  static async render(opts: ReleaseOptions): Promise<ChartRelease> {
    if (process.getuid?.() !== 0) throw new Error('running the chart needs root (mount namespaces, the image user): CI runs as root');
    const release = new ChartRelease(await renderChart(opts), opts);
    release.dns = await ClusterDns.start(release.dnsAddress, (name) => release.names().get(name));
    return release;
  }

  private dns?: ClusterDns;

  private get dnsAddress(): string {
    return `${this.ipBase}.250.53`;
  }

  /**
   * What the cluster's DNS answers: each Service name (short, namespaced, .svc,
   * .svc.cluster.local) to the Ready pods it selects, as endpoints follow
   * readiness; a name with none is unknown. Plus the outside hosts of the test.
   */
  private names(): Map<string, string[]> {
    const names = new Map<string, string[]>();
    const ns = this.opts.namespace;
    for (const svc of this.manifests.services) {
      const ready = this.pods.filter((p) => p.ready && p.workload.kind === 'Deployment' && selects({ matchLabels: svc.selector }, p.workload.labels));
      if (!ready.length) continue;
      for (const name of [svc.name, `${svc.name}.${ns}`, `${svc.name}.${ns}.svc`, `${svc.name}.${ns}.svc.cluster.local`]) {
        names.set(
          name,
          ready.map((p) => p.ip),
        );
      }
    }
    for (const [name, ip] of Object.entries(this.opts.hosts ?? {})) names.set(name.toLowerCase(), [ip]);
    return names;
  }

  /** The same names in the hosts file, for what resolves through getaddrinfo. */
  private writeHosts(): void {
    const lines = ['127.0.0.1 localhost'];
    for (const [name, ips] of this.names()) for (const ip of ips) lines.push(`${ip} ${name}`);
    // in place: each process's /etc/hosts is a bind mount of this very file
    writeFileSync(this.hostsFile, `${lines.join('\n')}\n`);
  }

  private allocateIp(): string {
    const n = this.nextIp++;
    return `${this.ipBase}.${n >> 8}.${n & 255 || 1}`;
  }

  /** The environment the kubelet gives the container: the image's, envFrom, then env. */
  private environment(pod: RunPod): Record<string, string> {
    const c = pod.container;
    const env: Record<string, string> = { ...this.image.env };
    const secret = (name: string) => this.opts.secrets[name];
    for (const from of c.envFrom ?? []) {
      if (from.configMapRef) {
        const data = this.manifests.configMaps.get(from.configMapRef.name);
        if (data) Object.assign(env, data);
        else refuse(pod, `ConfigMap ${from.configMapRef.name} not rendered`);
      }
      if (from.secretRef) {
        const data = secret(from.secretRef.name);
        if (data) Object.assign(env, data);
        else refuse(pod, `Secret ${from.secretRef.name} missing`);
      }
    }
    for (const v of c.env ?? []) {
      if (v.value !== undefined) env[v.name] = v.value;
      const ref = v.valueFrom;
      if (ref?.secretKeyRef) {
        const value = secret(ref.secretKeyRef.name)?.[ref.secretKeyRef.key];
        if (value !== undefined) env[v.name] = value;
        else if (!ref.secretKeyRef.optional) refuse(pod, `Secret ${ref.secretKeyRef.name} has no key ${ref.secretKeyRef.key} (CreateContainerConfigError)`);
      }
      if (ref?.configMapKeyRef) {
        const value = this.manifests.configMaps.get(ref.configMapKeyRef.name)?.[ref.configMapKeyRef.key];
        if (value !== undefined) env[v.name] = value;
        else if (!ref.configMapKeyRef.optional) refuse(pod, `ConfigMap ${ref.configMapKeyRef.name} has no key ${ref.configMapKeyRef.key}`);
      }
      if (ref?.fieldRef) {
        const field: Record<string, string> = { 'status.podIP': pod.ip, 'metadata.name': pod.name, 'metadata.namespace': this.opts.namespace };
        const value = field[ref.fieldRef.fieldPath];
        if (value !== undefined) env[v.name] = value;
        else refuse(pod, `fieldRef ${ref.fieldRef.fieldPath} not supported by the runner`);
      }
    }
    return env;
  }

  /** Starts one pod's (first) container as a process; resolves once it runs. */
  private launch(pod: RunPod): void {
    const c = pod.container;
    const env = this.environment(pod);
    const sc = { ...pod.workload.spec.securityContext, ...c.securityContext };
    const uid = sc.runAsUser ?? this.image.user?.uid ?? 0;
    const gid = sc.runAsGroup ?? this.image.user?.gid ?? 0;
    mkdirSync(pod.dir, { recursive: true });
    chmodSync(pod.dir, 0o777);
    // the emptyDir volumes, owned by fsGroup as the kubelet makes them
    const mounts: [string, string][] = [];
    for (const m of c.volumeMounts ?? []) {
      const vol = pod.workload.spec.volumes?.find((v) => v.name === m.name);
      if (!vol?.emptyDir) {
        refuse(pod, `volume ${m.name} is not an emptyDir: the runner (like a cluster without such storage) cannot give it`);
        continue;
      }
      const src = join(pod.dir, `vol-${m.name}`);
      mkdirSync(src, { recursive: true });
      chownSync(src, uid, pod.workload.spec.securityContext?.fsGroup ?? gid);
      chmodSync(src, 0o2775);
      mounts.push([src, m.mountPath]);
    }
    if (pod.problems.length) {
      pod.phase = 'failed';
      return;
    }
    const command = [...(c.command ?? this.image.cmd), ...(c.args ?? [])];
    // The repository is the image's /app: bound at the run's own `app` folder before
    // any volume is mounted, so an emptyDir on /tmp cannot hide a checkout that
    // lives under /tmp. Paths into it are taken through that folder.
    const app = this.appDir;
    const inApp = (p: string) => (p === root || p.startsWith(`${root}/`) ? join(app, relative(root, p)) : p);
    const nodeDir = inApp(dirname(process.execPath));
    const fullEnv: Record<string, string> = {
      PATH: `${nodeDir}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin`,
      HOSTNAME: pod.name,
      ...env,
      // the one change: each pod binds its own address, as 0.0.0.0 in a pod is its IP
      HOST: pod.ip,
      GRPC_HOST: pod.ip,
      METRICS_HOST: pod.ip,
      // the observer, not part of the pod
      NODE_OPTIONS: `${env.NODE_OPTIONS ?? ''} --require ${join(app, PRELOAD)}`.trim(),
      LAB_CONNECTION_LOG: pod.connectionLog,
    };
    const script = [
      'set -e',
      'mount --bind "$LAB_RUN_HOSTS" /etc/hosts',
      'mount --bind "$LAB_RUN_RESOLV" /etc/resolv.conf',
      `mount --bind ${root} ${app}`,
      ...(sc.readOnlyRootFilesystem ? [`mount -o remount,bind,ro ${app}`] : []),
      ...mounts.map(([src, dst]) => `mkdir -p ${dst} && mount --bind ${src} ${dst}`),
      `cd ${app}`,
      'unset LAB_RUN_HOSTS LAB_RUN_RESOLV',
      `exec setpriv --reuid=${uid} --regid=${gid} --clear-groups -- "$@"`,
    ].join('\n');
    const child = spawn('unshare', ['--mount', '--propagation', 'private', '--', 'sh', '-c', script, 'pod', ...command], {
      env: { ...fullEnv, LAB_RUN_HOSTS: this.hostsFile, LAB_RUN_RESOLV: this.resolvFile },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    pod.child = child;
    pod.phase = 'running';
    const onData = (b: Buffer) => (pod.tail = (pod.tail + b.toString()).slice(-TAIL));
    child.stdout.on('data', onData);
    child.stderr.on('data', onData);
    child.once('exit', (code, signal) => {
      pod.ready = false;
      if (pod.workload.kind !== 'Deployment') pod.phase = code === 0 ? 'succeeded' : 'failed';
      else if (!pod.isStopped) {
        pod.phase = 'failed';
        pod.problems.push(`exited (${code ?? signal}) while running: the kubelet would restart it`);
      }
      if (!pod.isStopped) this.writeHosts();
    });
  }

  /** The kubelet's probe loop of a running pod: startup first, then readiness and liveness. */
  private probe(pod: RunPod): void {
    const c = pod.container;
    const loop = (kind: string, p: Probe, onResult: (ok: boolean, why?: string) => boolean) => {
      let fails = 0;
      let oks = 0; // consecutive, as the thresholds count them
      const tick = async () => {
        if (pod.isStopped || pod.phase === 'failed') return;
        const why = await probeOnce(p, pod.ip, c);
        if (why) pod.lastProbeFailure = `${kind}: ${why}`;
        if (why) {
          oks = 0;
          fails++;
        } else {
          fails = 0;
          oks++;
        }
        const goOn = onResult(!why, why === undefined ? undefined : `${kind} probe failed ${fails} times in a row: ${why}`);
        if (goOn) pod.schedule(() => void tick(), (p.periodSeconds ?? 10) * 1000);
      };
      pod.schedule(() => void tick(), (p.initialDelaySeconds ?? 0) * 1000);
      return { fails: () => fails, oks: () => oks };
    };
    const startSteady = () => {
      if (c.readinessProbe) {
        const r = c.readinessProbe;
        const state = loop('readiness', r, (ok) => {
          const was = pod.ready;
          if (ok && state.oks() >= (r.successThreshold ?? 1)) pod.ready = true;
          if (!ok && state.fails() >= (r.failureThreshold ?? 3)) pod.ready = false;
          if (was !== pod.ready) this.writeHosts();
          return true;
        });
      } else {
        pod.ready = true;
        this.writeHosts();
      }
      if (c.livenessProbe) {
        const l = c.livenessProbe;
        const state = loop('liveness', l, (ok, why) => {
          if (!ok && state.fails() >= (l.failureThreshold ?? 3)) {
            pod.problems.push(`${why}: the kubelet would kill the container`);
            pod.phase = 'killed';
            void pod.stop('SIGKILL');
            return false;
          }
          return true;
        });
      }
    };
    if (c.startupProbe) {
      const s = c.startupProbe;
      const state = loop('startup', s, (ok, why) => {
        if (ok) {
          startSteady();
          return false;
        }
        if (state.fails() >= (s.failureThreshold ?? 3)) {
          pod.problems.push(`${why}: the kubelet would kill the container`);
          pod.phase = 'killed';
          void pod.stop('SIGKILL');
          return false;
        }
        return true;
      });
    } else {
      startSteady();
    }
  }

  private newPod(w: Workload, n: number): RunPod {
    const name = w.kind === 'Deployment' ? `${w.name}-${n}` : w.name;
    const pod = new RunPod(name, w, this.allocateIp(), join(this.dir, 'pods', `${name}-${this.nextIp}`), this.opts.namespace);
    this.pods.push(pod);
    return pod;
  }

  /** Runs the hook pods of `hook` (pre-install: the migrations) in weight order, each to completion. */
  async runHooks(hook: string, timeoutMs = 120_000): Promise<RunPod[]> {
    const hooks = this.manifests.workloads.filter((w) => w.hook?.split(',').includes(hook)).sort((a, b) => a.hookWeight - b.hookWeight);
    const done: RunPod[] = [];
    // hooks of one weight run side by side, as helm creates them together
    for (const weight of [...new Set(hooks.map((h) => h.hookWeight))]) {
      const batch = hooks.filter((h) => h.hookWeight === weight).map((w) => this.newPod(w, 1));
      for (const pod of batch) this.launch(pod);
      await Promise.all(batch.map((pod) => waitExit(pod, timeoutMs)));
      done.push(...batch);
    }
    return done;
  }

  /** Starts every Deployment's pods at once, as a fresh install does, and waits until each is Ready or has failed. */
  async startDeployments(): Promise<void> {
    const deployments = this.manifests.workloads.filter((w) => w.kind === 'Deployment');
    const started: RunPod[] = [];
    for (const w of deployments) {
      const count = Math.min(w.replicas, this.opts.maxPodsPerDeployment ?? w.replicas);
      for (let n = 1; n <= count; n++) started.push(this.newPod(w, n));
    }
    for (const pod of started) {
      this.launch(pod);
      if (pod.phase === 'running') this.probe(pod);
    }
    const deadline = Date.now() + (this.opts.readyTimeoutMs ?? 180_000);
    while (Date.now() < deadline && started.some((p) => !p.ready && p.phase === 'running')) {
      await new Promise((r) => setTimeout(r, 250));
    }
    for (const p of started) {
      if (!p.ready && !p.problems.length)
        p.problems.push(`not Ready within ${this.opts.readyTimeoutMs ?? 180_000} ms (last probe failure: ${p.lastProbeFailure ?? 'none'})`);
    }
  }

  /** Runs a bare Pod of the release (the `helm test` hook) to completion. */
  async runTestPods(timeoutMs = 120_000): Promise<RunPod[]> {
    return this.runHooks('test', timeoutMs);
  }

  podsOf(component: string): RunPod[] {
    return this.pods.filter((p) => p.workload.labels['app.kubernetes.io/component'] === component && p.workload.kind === 'Deployment');
  }

  /** Every connection recorded so far, with the policies' verdict on it. */
  connections(): Connection[] {
    const ns = this.opts.namespace;
    const out: Connection[] = [];
    for (const pod of this.pods) {
      const from = pod.endpoint;
      for (const c of pod.connections()) {
        if (c.ip === pod.ip) continue; // a pod always reaches itself
        const target = this.pods.find((p) => p.ip === c.ip);
        if (target) {
          const to = target.endpoint;
          out.push({ pod: pod.name, to: target.name, port: c.port, verdict: connectionVerdict(this.manifests.networkPolicies, ns, from, to, c.port) });
          continue;
        }
        const ext = this.opts.externals.find((e) => e.host === c.ip && e.port === c.port);
        if (ext) {
          out.push({
            pod: pod.name,
            to: ext.label,
            port: ext.as.port,
            verdict: connectionVerdict(this.manifests.networkPolicies, ns, from, { ip: ext.as.ip, pod: ext.as.pod }, ext.as.port),
          });
          continue;
        }
        out.push({
          pod: pod.name,
          to: c.ip,
          port: c.port,
          verdict: { allowed: false, reason: 'an address the run does not model: neither a pod of the release nor a declared external' },
        });
      }
    }
    return out;
  }

  /** What a cluster would refuse: pods that failed, were killed or never became Ready, and dropped connections. */
  problems(): string[] {
    const out: string[] = [];
    for (const p of this.pods) for (const why of p.problems) out.push(`${p.name}: ${why}\n${p.tail.slice(-1500)}`);
    for (const c of this.connections()) if (!c.verdict.allowed) out.push(`${c.pod} -> ${c.to}:${c.port}: ${c.verdict.reason}`);
    return out;
  }

  /** For a failure message: the problems, then each pod's log lines at warn level or above. */
  report(): string {
    // every pod's output, for a look after the run (the run's own folder goes with it)
    const keep = '/var/tmp/lab-chart-run-last';
    rmSync(keep, { recursive: true, force: true });
    mkdirSync(keep, { recursive: true });
    for (const p of this.pods) writeFileSync(join(keep, `${p.name}.log`), p.tail);
    const lines = [`(each pod's output: ${keep})`, ...this.problems()];
    for (const p of this.pods) {
      const loud = p.tail.split('\n').filter((l) => /"level":(4|5|6)\d/.test(l) || (l && !l.startsWith('{')));
      if (loud.length) lines.push(`${p.name}:\n  ${loud.slice(-12).join('\n  ')}`);
    }
    const edges = new Set(this.connections().map((c) => `${c.pod} -> ${c.to}:${c.port}`));
    lines.push(`connections: ${[...edges].sort().join(', ')}`);
    return lines.join('\n');
  }

  async stop(): Promise<void> {
    // the processes drain first (LAB_SHUTDOWN_DRAIN_MS), as in a pod's grace period
    await Promise.all(this.pods.map((p) => p.stop('SIGTERM', 30_000)));
    await this.dns?.close();
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/** A pod the kubelet could not start: its problem recorded. */
function refuse(pod: RunPod, why: string): void {
  pod.problems.push(why);
}

function waitExit(pod: RunPod, timeoutMs: number): Promise<void> {
  const child = pod.child;
  if (!child || child.exitCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    const timer = setTimeout(() => {
      pod.problems.push(`did not finish within ${timeoutMs} ms`);
      child.kill('SIGKILL');
    }, timeoutMs);
    child.once('exit', (code) => {
      clearTimeout(timer);
      if (code !== 0) pod.problems.push(`exited ${code}`);
      resolve();
    });
  });
}
