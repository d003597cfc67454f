import ipaddr from 'ipaddr.js';

/**
 * Kubernetes NetworkPolicy semantics (networking.k8s.io/v1) as a pure function:
 * would a TCP connection from one endpoint to another get through the policies
 * of a namespace? The chart runner checks every connection its processes make
 * against the rendered policies with it, so a policy that would drop a real
 * connection fails the build instead of a first install.
 *
 * What the API documents, and nothing a CNI adds: a pod selected by no policy of
 * a direction is open in it; a pod selected by one is open only to what some rule
 * of some selecting policy allows (rules add up); a rule without peers or without
 * ports matches every peer or port; a named port is the destination pod's
 * container port of that name; `ipBlock` matches addresses, `podSelector` pods of
 * the policy's namespace, `namespaceSelector` (with a `podSelector`, both) pods
 * of the namespaces it selects.
 */

export interface LabelSelector {
  matchLabels?: Record<string, string>;
  matchExpressions?: { key: string; operator: 'In' | 'NotIn' | 'Exists' | 'DoesNotExist'; values?: string[] }[];
}

interface PolicyPeer {
  podSelector?: LabelSelector;
  namespaceSelector?: LabelSelector;
  ipBlock?: { cidr: string; except?: string[] };
}

interface PolicyPort {
  protocol?: string;
  port?: number | string;
  endPort?: number;
}

interface PolicyRule {
  ports?: PolicyPort[];
}

export interface NetworkPolicy {
  metadata: { name: string; namespace?: string };
  spec: {
    podSelector: LabelSelector;
    policyTypes?: ('Ingress' | 'Egress')[];
    ingress?: (PolicyRule & { from?: PolicyPeer[] })[];
    egress?: (PolicyRule & { to?: PolicyPeer[] })[];
  };
}

/** One side of a connection: a pod (with labels) or an address outside the cluster's pods. */
export interface Endpoint {
  ip: string;
  /** a pod's namespace and labels; undefined for an address that is no pod */
  pod?: { namespace: string; labels: Record<string, string>; namespaceLabels?: Record<string, string>; namedPorts?: Record<string, number> };
}

export interface Verdict {
  allowed: boolean;
  /** the policy that let it through, or why it would be dropped */
  reason: string;
}

export function selects(selector: LabelSelector | undefined, labels: Record<string, string>): boolean {
  if (!selector) return true;
  for (const [k, v] of Object.entries(selector.matchLabels ?? {})) if (labels[k] !== v) return false;
  for (const e of selector.matchExpressions ?? []) {
    const has = Object.hasOwn(labels, e.key);
    const inValues = has && (e.values ?? []).includes(labels[e.key]!);
    const ok = e.operator === 'In' ? inValues : e.operator === 'NotIn' ? !inValues : e.operator === 'Exists' ? has : !has;
    if (!ok) return false;
  }
  return true;
}

function inCidr(ip: string, cidr: string): boolean {
  const addr = ipaddr.process(ip);
  const [net, bits] = ipaddr.parseCIDR(cidr);
  return addr.kind() === net.kind() && addr.match(net, bits);
}

/** Whether `peer` (a rule's from/to entry, in policy namespace `ns`) is the endpoint `e`. */
function peerMatches(peer: PolicyPeer, ns: string, e: Endpoint): boolean {
  if (peer.ipBlock) return inCidr(e.ip, peer.ipBlock.cidr) && !(peer.ipBlock.except ?? []).some((c) => inCidr(e.ip, c));
  if (!e.pod) return false;
  if (peer.namespaceSelector) {
    if (!selects(peer.namespaceSelector, e.pod.namespaceLabels ?? { 'kubernetes.io/metadata.name': e.pod.namespace })) return false;
  } else if (e.pod.namespace !== ns) {
    return false;
  }
  return selects(peer.podSelector, e.pod.labels);
}

function portMatches(ports: PolicyPort[] | undefined, port: number, target: Endpoint): boolean {
  if (!ports?.length) return true;
  return ports.some((p) => {
    if ((p.protocol ?? 'TCP') !== 'TCP') return false;
    if (p.port === undefined) return true;
    if (typeof p.port === 'string') return target.pod?.namedPorts?.[p.port] === port;
    return p.endPort ? port >= p.port && port <= p.endPort : port === p.port;
  });
}

const hasType = (p: NetworkPolicy, type: 'Ingress' | 'Egress') =>
  p.spec.policyTypes ? p.spec.policyTypes.includes(type) : type === 'Ingress' || p.spec.egress !== undefined;

/** The policies of `ns` that isolate `pod` in one direction. */
function isolating(policies: NetworkPolicy[], ns: string, pod: Endpoint['pod'], type: 'Ingress' | 'Egress') {
  if (!pod || pod.namespace !== ns) return [];
  return policies.filter((p) => hasType(p, type) && selects(p.spec.podSelector, pod.labels));
}

/**
 * The verdict on a TCP connection from `from` to `to`:`port`, under the policies of
 * namespace `ns`: both the source's egress and the destination's ingress must let it through.
 */
export function connectionVerdict(policies: NetworkPolicy[], ns: string, from: Endpoint, to: Endpoint, port: number): Verdict {
  const reasons: string[] = [];
  const egress = isolating(policies, ns, from.pod, 'Egress');
  if (egress.length) {
    const by = egress.find((p) =>
      (p.spec.egress ?? []).some((r) => portMatches(r.ports, port, to) && (!r.to?.length || r.to.some((peer) => peerMatches(peer, ns, to)))),
    );
    if (!by) return { allowed: false, reason: `egress dropped: no rule of ${egress.map((p) => p.metadata.name).join(', ')} allows ${to.ip}:${port}` };
    reasons.push(`egress by ${by.metadata.name}`);
  }
  const ingress = isolating(policies, ns, to.pod, 'Ingress');
  if (ingress.length) {
    const by = ingress.find((p) =>
      (p.spec.ingress ?? []).some((r) => portMatches(r.ports, port, to) && (!r.from?.length || r.from.some((peer) => peerMatches(peer, ns, from)))),
    );
    if (!by) return { allowed: false, reason: `ingress dropped: no rule of ${ingress.map((p) => p.metadata.name).join(', ')} allows ${from.ip} on ${port}` };
    reasons.push(`ingress by ${by.metadata.name}`);
  }
  return { allowed: true, reason: reasons.join(', ') || 'no policy isolates either side' };
}
