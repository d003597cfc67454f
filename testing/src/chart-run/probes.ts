import { request } from 'node:http';
import { connect as tcpConnect } from 'node:net';
import * as grpc from '@grpc/grpc-js';
import { service as healthService } from 'grpc-health-check';
import type { Container, Probe } from './manifests.js';

/**
 * One probe, done as the kubelet does it: httpGet (a status of 200-399 passes),
 * grpc (grpc.health.v1.Health/Check answers SERVING), tcpSocket (the port
 * accepts), each within timeoutSeconds (default 1).
 * A named port is the container's port of that name; a name the container does
 * not declare fails the probe, as it does in a cluster.
 */
export async function probeOnce(probe: Probe, ip: string, container: Container): Promise<string | undefined> {
  const timeoutMs = (probe.timeoutSeconds ?? 1) * 1000;
  const port = (p: number | string) => {
    if (typeof p === 'number') return p;
    const named = container.ports?.find((c) => c.name === p)?.containerPort;
    if (named === undefined) throw new Error(`the container declares no port named "${p}"`);
    return named;
  };
  try {
    if (probe.httpGet) return await httpProbe(ip, port(probe.httpGet.port), probe.httpGet.path ?? '/', timeoutMs);
    if (probe.grpc) return await grpcProbe(ip, probe.grpc.port, probe.grpc.service ?? '', timeoutMs);
    if (probe.tcpSocket) return await tcpProbe(ip, port(probe.tcpSocket.port), timeoutMs);
    // the chart has none; a runner that ran one would need the pod's namespaces
    if (probe.exec) return 'exec probes are not run by the chart runner';
    return 'the probe has no handler';
  } catch (err) {
    return (err as Error).message;
  }
}

function httpProbe(host: string, port: number, path: string, timeoutMs: number): Promise<string | undefined> {
  return new Promise((resolve) => {
    const req = request({ host, port, path, timeout: timeoutMs, headers: { 'user-agent': 'kube-probe/1.33' } }, (res) => {
      res.resume();
      const s = res.statusCode ?? 0;
      resolve(s >= 200 && s < 400 ? undefined : `GET ${path} on ${port} answered ${s}`);
    });
    req.once('timeout', () => req.destroy(new Error(`GET ${path} on ${port}: no answer within ${timeoutMs} ms`)));
    req.once('error', (err) => resolve(`GET ${path} on ${port}: ${err.message}`));
    req.end();
  });
}

function tcpProbe(host: string, port: number, timeoutMs: number): Promise<string | undefined> {
  return new Promise((resolve) => {
    const s = tcpConnect({ host, port, timeout: timeoutMs });
    s.once('connect', () => {
      s.destroy();
      resolve(undefined);
    });
    s.once('timeout', () => {
      s.destroy();
      resolve(`tcp ${port}: no answer within ${timeoutMs} ms`);
    });
    s.once('error', (err) => resolve(`tcp ${port}: ${err.message}`));
  });
}

const HealthClient = grpc.makeGenericClientConstructor(healthService, 'grpc.health.v1.Health');

function grpcProbe(host: string, port: number, service: string, timeoutMs: number): Promise<string | undefined> {
  // a new connection each time, as the kubelet's probe makes
  const client = new HealthClient(`${host}:${port}`, grpc.credentials.createInsecure());
  const check = (client.Check as (...args: unknown[]) => void).bind(client) as (
    req: { service: string },
    opts: grpc.CallOptions,
    cb: (err: grpc.ServiceError | null, res?: { status?: string }) => void,
  ) => void;
  return new Promise<string | undefined>((resolve) => {
    check({ service }, { deadline: Date.now() + timeoutMs }, (err, res) => {
      if (err) resolve(`grpc health on ${port}: ${err.details || err.message}`);
      else resolve(res?.status === 'SERVING' ? undefined : `grpc health on ${port}: ${res?.status ?? 'no status'}`);
    });
  }).finally(() => client.close());
}
