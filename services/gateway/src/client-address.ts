import { isIP } from 'node:net';
import type { Request } from 'express';
import { z } from 'zod';

const NAMED = new Set(['loopback', 'linklocal', 'uniquelocal']);
const isSubnet = (s: string) => {
  const [ip, bits, ...rest] = s.split('/');
  const family = isIP(ip ?? '');
  return !rest.length && family !== 0 && (bits === undefined || (/^\d+$/.test(bits) && Number(bits) <= (family === 4 ? 32 : 128)));
};

/**
 * LAB_TRUST_PROXY: which proxies in front of the gateway may name the client in
 * X-Forwarded-For (express's `trust proxy`). `false` (default: the peer is the
 * client), `true` (any: only when nothing but a proxy can reach the gateway), a
 * number of hops, or a comma list of `loopback`, `linklocal`, `uniquelocal` and
 * addresses or CIDR subnets (e.g. the ingress controller's pod network). The
 * client address keys the sign-in and operator throttles: behind an ingress
 * without it, every client would share the ingress's address and budget.
 */
export const trustProxySetting = z
  .string()
  .default('false')
  .transform((v, ctx): boolean | number | string[] => {
    const s = v.trim();
    if (s === 'false' || s === '') return false;
    if (s === 'true') return true;
    if (/^\d+$/.test(s)) return Number(s);
    const list = s.split(',').map((x) => x.trim());
    const bad = list.filter((x) => !NAMED.has(x) && !isSubnet(x));
    if (bad.length) {
      ctx.addIssue({ code: 'custom', message: `not true, false, a hop count, or loopback/linklocal/uniquelocal/addresses/CIDRs: ${bad.join(', ')}` });
      return z.NEVER;
    }
    return list;
  });
export type TrustProxy = z.output<typeof trustProxySetting>;

/** The client's address as the trusted proxies report it (express req.ip), else the peer's. */
export const clientAddress = (req: Request): string => req.ip ?? req.socket.remoteAddress ?? 'unknown';
