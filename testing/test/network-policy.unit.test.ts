import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseAllDocuments } from 'yaml';
import { connectionVerdict, selects, type Endpoint, type NetworkPolicy } from '../src/chart-run/network-policy';
import { renderChart } from '../src/chart-run/manifests';

/**
 * The NetworkPolicy semantics the chart runner judges connections by, on
 * policies written here and on the chart's own: chart 0.1.0's (a fixture) dropped
 * every webhook delivery; the chart's today let deliveries reach public
 * addresses and nothing private.
 */

const pod = (component: string, ip: string, namedPorts: Record<string, number> = {}): Endpoint => ({
  ip,
  pod: { namespace: 'lab', labels: { 'app.kubernetes.io/instance': 'lab', 'app.kubernetes.io/component': component }, namedPorts },
});
const outside = (ip: string): Endpoint => ({ ip });

const policy = (spec: NetworkPolicy['spec'], name = 'p'): NetworkPolicy => ({ metadata: { name }, spec });

describe('label selectors', () => {
  it('match labels and expressions; an empty selector matches everything', () => {
    expect(selects({}, { a: '1' })).toBe(true);
    expect(selects({ matchLabels: { a: '1' } }, { a: '1', b: '2' })).toBe(true);
    expect(selects({ matchLabels: { a: '1' } }, { a: '2' })).toBe(false);
    expect(selects({ matchExpressions: [{ key: 'a', operator: 'In', values: ['1', '2'] }] }, { a: '2' })).toBe(true);
    expect(selects({ matchExpressions: [{ key: 'a', operator: 'NotIn', values: ['1'] }] }, { a: '1' })).toBe(false);
    expect(selects({ matchExpressions: [{ key: 'a', operator: 'Exists' }] }, {})).toBe(false);
    expect(selects({ matchExpressions: [{ key: 'a', operator: 'DoesNotExist' }] }, {})).toBe(true);
  });
});

describe('connection verdicts', () => {
  const web = pod('web', '10.0.0.1');
  const db = pod('db', '10.0.0.2', { pg: 5432 });

  it('lets everything through when no policy selects either side', () => {
    expect(connectionVerdict([], 'lab', web, db, 5432).allowed).toBe(true);
  });

  it('drops egress no rule allows once a policy isolates the source', () => {
    const egressOnly = policy({
      podSelector: { matchLabels: { 'app.kubernetes.io/component': 'web' } },
      policyTypes: ['Egress'],
      egress: [{ ports: [{ port: 53, protocol: 'UDP' }] }],
    });
    expect(connectionVerdict([egressOnly], 'lab', web, db, 5432)).toMatchObject({ allowed: false });
    // a rule without ports and peers opens everything
    const open = policy({ podSelector: {}, policyTypes: ['Egress'], egress: [{}] }, 'open');
    expect(connectionVerdict([egressOnly, open], 'lab', web, db, 5432)).toMatchObject({ allowed: true });
  });

  it('checks the destination ingress too, with named ports of the destination pod', () => {
    const ingress = policy({
      podSelector: { matchLabels: { 'app.kubernetes.io/component': 'db' } },
      ingress: [{ from: [{ podSelector: { matchLabels: { 'app.kubernetes.io/component': 'web' } } }], ports: [{ port: 'pg' }] }],
    });
    expect(connectionVerdict([ingress], 'lab', web, db, 5432).allowed).toBe(true);
    expect(connectionVerdict([ingress], 'lab', web, db, 5433).allowed).toBe(false);
    expect(connectionVerdict([ingress], 'lab', pod('other', '10.0.0.3'), db, 5432).allowed).toBe(false);
    // a pod selector without a namespace selector means the policy's own namespace
    const elsewhere: Endpoint = { ip: '10.0.0.4', pod: { namespace: 'other', labels: web.pod!.labels } };
    expect(connectionVerdict([ingress], 'lab', elsewhere, db, 5432).allowed).toBe(false);
  });

  it('matches ipBlocks with their exceptions, and namespaces by their labels', () => {
    const p = policy({
      podSelector: {},
      policyTypes: ['Egress'],
      egress: [
        { to: [{ ipBlock: { cidr: '0.0.0.0/0', except: ['10.0.0.0/8'] } }], ports: [{ port: 443 }] },
        { to: [{ namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': 'data' } } }], ports: [{ port: 5432 }] },
      ],
    });
    expect(connectionVerdict([p], 'lab', web, outside('198.51.100.7'), 443).allowed).toBe(true);
    expect(connectionVerdict([p], 'lab', web, outside('10.1.2.3'), 443).allowed).toBe(false);
    expect(connectionVerdict([p], 'lab', web, outside('198.51.100.7'), 80).allowed).toBe(false);
    const store: Endpoint = { ip: '10.9.0.1', pod: { namespace: 'data', labels: {}, namespaceLabels: { 'kubernetes.io/metadata.name': 'data' } } };
    expect(connectionVerdict([p], 'lab', web, store, 5432).allowed).toBe(true);
    expect(connectionVerdict([p], 'lab', web, outside('10.9.0.1'), 5432).allowed).toBe(false);
  });
});

describe("the chart's policies", () => {
  const receiver = outside('198.51.100.80');
  const privateReceiver = outside('10.20.30.40');

  it('of chart 0.1.0 dropped every webhook delivery to a receiver outside the cluster (the negative case)', () => {
    const text = readFileSync(join(__dirname, 'fixtures', 'chart-0.1.0', 'networkpolicies.yaml'), 'utf8');
    const old = parseAllDocuments(text).map((d) => d.toJS() as NetworkPolicy);
    expect(connectionVerdict(old, 'lab', pod('webhooks', '10.1.0.9'), receiver, 443)).toMatchObject({ allowed: false });
    // and let through what it meant to: the gateway to a service, a service to its store
    expect(connectionVerdict(old, 'lab', pod('gateway', '10.1.0.1'), pod('webhooks', '10.1.0.9', { grpc: 50051 }), 50051).allowed).toBe(true);
    expect(connectionVerdict(old, 'lab', pod('webhooks', '10.1.0.9'), outside('10.5.0.5'), 5432).allowed).toBe(true);
  });

  it('of the chart today let deliveries reach public receivers, never private addresses', async () => {
    const { networkPolicies } = await renderChart({ release: 'lab', namespace: 'lab' });
    const webhooks = pod('webhooks', '10.1.0.9');
    expect(connectionVerdict(networkPolicies, 'lab', webhooks, receiver, 443)).toMatchObject({ allowed: true });
    expect(connectionVerdict(networkPolicies, 'lab', webhooks, privateReceiver, 443)).toMatchObject({ allowed: false });
    expect(connectionVerdict(networkPolicies, 'lab', webhooks, outside('169.254.169.254'), 80)).toMatchObject({ allowed: false });
    // a service that makes no outbound calls still cannot reach the internet
    expect(connectionVerdict(networkPolicies, 'lab', pod('audit', '10.1.0.7'), receiver, 443)).toMatchObject({ allowed: false });
  });
});
