import { z } from 'zod';

/**
 * The gRPC target forms a service address variable (`NOTEBOOK_ADDR`, ...) takes.
 * grpc-js resolves each of them itself; this check only refuses, at start, a value
 * it would take for something else (a forgotten port makes grpc-js dial 443, a
 * typo'd scheme becomes a host name) so an operator reads the mistake in the log
 * instead of a 503 on the first call:
 *
 * - `host:port`, `[v6]:port`: one address, resolved by DNS (today's form);
 * - `dns:///host:port`, `dns://resolver/host:port`: every A/AAAA record of the
 *   name, re-resolved when a connection closes (a headless Kubernetes Service);
 * - `ipv4:a:port,b:port`, `ipv6:[a]:port,[b]:port`: a fixed list of replicas;
 * - `unix:path`, `unix:///abs/path`: a local socket.
 *
 * Calls are spread over every ready address (round_robin, see grpc.ts).
 */
const HOST = String.raw`(?:[A-Za-z0-9](?:[A-Za-z0-9.\-_]*[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\])`;
const PORT = String.raw`(?:6553[0-5]|655[0-2]\d|65[0-4]\d\d|6[0-4]\d{3}|[1-5]\d{4}|[1-9]\d{0,3})`;
const IPV4 = String.raw`(?:\d{1,3}(?:\.\d{1,3}){3})`;
const IPV6 = String.raw`(?:\[[0-9A-Fa-f:.]+\])`;

const FORMS: RegExp[] = [
  new RegExp(`^${HOST}:${PORT}$`),
  new RegExp(`^dns:(?://[^/\\s]*/)?${HOST}:${PORT}$`),
  new RegExp(`^ipv4:${IPV4}:${PORT}(?:,${IPV4}:${PORT})*$`),
  new RegExp(`^ipv6:${IPV6}:${PORT}(?:,${IPV6}:${PORT})*$`),
  /^unix:(?:\/\/)?\/?[^\s,]+$/,
];

/** True when `value` is a gRPC target of one of the forms above. */
export function isGrpcTarget(value: string): boolean {
  return FORMS.some((f) => f.test(value));
}

/** The form an address variable must have, for error messages and docs. */
export const GRPC_TARGET_FORMS = 'host:port, dns:///host:port, ipv4:ip:port[,ip:port...], ipv6:[ip]:port[,...] or unix:path';

/** zod schema of an optional address variable. */
export const grpcTarget = z
  .string()
  .refine(isGrpcTarget, { error: `must be a gRPC target: ${GRPC_TARGET_FORMS}` })
  .optional();

/**
 * Refinement of a process's environment: every `<NAME>_ADDR` it holds is a gRPC
 * target. A service reads its peers' addresses when first needed (peers.ts), so
 * without this a wrong one would show only as 503s on its first call.
 */
export function addressVariablesAreTargets(env: Record<string, unknown>, ctx: z.RefinementCtx): void {
  for (const [name, value] of Object.entries(env)) {
    if (/^[A-Z][A-Z0-9_]*_ADDR$/.test(name) && typeof value === 'string' && value !== '' && !isGrpcTarget(value)) {
      ctx.addIssue({ code: 'custom', path: [name], message: `must be a gRPC target: ${GRPC_TARGET_FORMS}` });
    }
  }
}
