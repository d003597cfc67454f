import dns, { lookup as dnsLookup, type LookupAddress } from 'node:dns';
import type { LookupFunction } from 'node:net';
import ipaddr from 'ipaddr.js';

/**
 * Outbound-request guard against server-side request forgery: a URL chosen by a
 * tenant (webhook receivers, job fetches) must not reach the service's own
 * network. Only globally routable unicast addresses pass: loopback, private,
 * link-local (cloud metadata 169.254.169.254), CGNAT, unique-local, multicast,
 * broadcast, unspecified, reserved and translation ranges (6to4, NAT64, which
 * embed IPv4 addresses) are refused, IPv4-mapped IPv6 judged as the IPv4 inside.
 *
 * The address is checked once and then connected to as checked (the lookup
 * handed to the http agent returns it), so a second DNS answer cannot swap in
 * an internal address between check and connect (DNS rebinding).
 */
export class BlockedAddressError extends Error {
  override name = 'BlockedAddressError';
  readonly code = 'blocked_address';
  constructor(
    readonly host: string,
    readonly address?: string,
  ) {
    super(address && address !== host ? `${host} resolves to a blocked address (${address})` : `${host} is a blocked address`);
  }
}

/** True when the address is not a globally routable unicast address (or not an IP at all). */
export function isBlockedAddress(address: string): boolean {
  if (!ipaddr.isValid(address)) return true;
  // process() turns IPv4-mapped IPv6 (::ffff:a.b.c.d) into the IPv4 address inside
  return ipaddr.process(address).range() !== 'unicast';
}

/** The hostname of a URL without IPv6 brackets. */
const bare = (hostname: string) => (hostname.startsWith('[') && hostname.endsWith(']') ? hostname.slice(1, -1) : hostname);

export interface ResolvedTarget {
  address: string;
  family: 4 | 6;
}

export type Resolver = (host: string) => Promise<LookupAddress[]>;

const osLookup: Resolver = (host) =>
  new Promise((resolve, reject) => dnsLookup(host, { all: true, order: 'verbatim' }, (err, addrs) => (err ? reject(err) : resolve(addrs))));

/** Answers that mean the DNS was asked and knows no such address (as opposed to not answering). */
const NO_SUCH_NAME = new Set<string>([dns.NOTFOUND, dns.NODATA]);
const LOOPBACK: LookupAddress[] = [
  { address: '127.0.0.1', family: 4 },
  { address: '::1', family: 6 },
];

/**
 * A resolver that asks DNS directly (c-ares: sockets, its own timeout) instead of
 * through getaddrinfo. dns.lookup runs on libuv's threadpool of 4 and cannot be
 * cancelled: a tenant's webhook host whose DNS never answers held a thread per
 * attempt for as long as the system resolver retried, and the pool is shared with
 * every other lookup, fs and (in the standalone process) password hashing. Here a
 * silent DNS fails the attempt after `timeoutMs` x `tries` and holds nothing.
 * Names DNS says do not exist still go to the system lookup (the hosts file,
 * search domains such as a cluster's short service names); `localhost` is loopback
 * (RFC 6761). `servers` replaces the system's name servers (tests).
 */
export function dnsResolver(opts: { timeoutMs?: number; tries?: number; servers?: string[]; fallback?: Resolver } = {}): Resolver {
  const r = new dns.promises.Resolver({ timeout: opts.timeoutMs ?? 2_000, tries: opts.tries ?? 2 });
  if (opts.servers) r.setServers(opts.servers);
  const fallback = opts.fallback ?? osLookup;
  return async (host) => {
    const name = host.toLowerCase().replace(/\.$/, '');
    if (name === 'localhost' || name.endsWith('.localhost')) return LOOPBACK;
    const [v4, v6] = await Promise.allSettled([r.resolve4(name), r.resolve6(name)]);
    const found: LookupAddress[] = [
      ...(v4.status === 'fulfilled' ? v4.value.map((address) => ({ address, family: 4 })) : []),
      ...(v6.status === 'fulfilled' ? v6.value.map((address) => ({ address, family: 6 })) : []),
    ];
    if (found.length) return found;
    const failures = [v4, v6].flatMap((x) => (x.status === 'rejected' ? [x.reason as NodeJS.ErrnoException] : []));
    if (failures.every((e) => NO_SUCH_NAME.has(e.code ?? ''))) return fallback(host);
    // not every failure is a missing name, so one is something else
    throw failures.find((e) => !NO_SUCH_NAME.has(e.code ?? ''))!;
  };
}

const systemResolver: Resolver = dnsResolver();

/**
 * Resolves a host (all addresses) and returns the first allowed one, or throws
 * BlockedAddressError when none is allowed. `allowPrivate` lifts the block
 * (tests and local receivers).
 */
export async function resolveAllowed(hostname: string, allowPrivate: boolean, resolver: Resolver = systemResolver): Promise<ResolvedTarget> {
  const host = bare(hostname);
  if (ipaddr.isValid(host)) {
    if (!allowPrivate && isBlockedAddress(host)) throw new BlockedAddressError(host, host);
    return { address: host, family: ipaddr.parse(host).kind() === 'ipv6' ? 6 : 4 };
  }
  const addrs = await resolver(host);
  const usable = allowPrivate ? addrs : addrs.filter((a) => !isBlockedAddress(a.address));
  const first = usable[0];
  if (!first) throw new BlockedAddressError(host, addrs[0]?.address);
  return { address: first.address, family: first.family === 6 ? 6 : 4 };
}

/**
 * A `lookup` for http.request / net.connect that answers only the address
 * already checked: the connection goes where the guard looked, and Host and
 * SNI still carry the hostname.
 */
export function pinnedLookup(target: ResolvedTarget): LookupFunction {
  return ((_host: string, opts: { all?: boolean } | number | undefined, cb: (...args: unknown[]) => void) => {
    const callback = typeof opts === 'function' ? (opts as (...args: unknown[]) => void) : cb;
    if (typeof opts === 'object' && (opts as { all?: boolean } | null)?.all) callback(null, [{ address: target.address, family: target.family }]);
    else callback(null, target.address, target.family);
  }) as unknown as LookupFunction;
}
