import { createHash, randomBytes, randomUUID } from 'node:crypto';
import { readdir } from 'node:fs/promises';
import { jobs, telemetryWire } from '@lab/contracts';
import { RpcClient, type CallerContext } from '@lab/kit';
import { startCluster, type Cluster } from '../src/cluster';
import { describeWithServers } from '../src/servers';
import { waitFor } from '../src/waits';

/**
 * Raw instrument files and job artifacts with two replicas each of telemetry and
 * jobs, every process with a data directory of its own (pods without a shared
 * ReadWriteMany volume): what one replica stored, each replica reads back byte
 * for byte, from the service's schema, and no file lands in any directory.
 */
const MiB = 1024 * 1024;

describeWithServers(['postgres', 'rabbitmq'], 'files and artifacts across replicas without a shared directory', () => {
  jest.setTimeout(240_000);
  let cluster: Cluster;
  let token: string;
  let caller: CallerContext;
  const clients: { close(): void }[] = [];

  beforeAll(async () => {
    cluster = await startCluster({
      services: ['identity', 'notebook', 'audit', 'telemetry', 'jobs'],
      replicas: { gateway: 2, telemetry: 2, jobs: 2 },
      ownDataDirs: true,
      serviceEnv: { jobs: { JOBS_POLL_MS: '200' } },
      startTimeoutMs: 60_000,
    });
    const admin = async (method: string, path: string, body: unknown) => {
      const r = await fetch(`${cluster.url}${path}`, {
        method,
        headers: { authorization: `Bearer ${cluster.operatorToken}`, 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
      const answer = (await r.json()) as { data: { id: string; token: string } };
      if (r.status >= 300) throw new Error(`${method} ${path} -> ${r.status} ${JSON.stringify(answer)}`);
      return answer.data;
    };
    const org = await admin('POST', '/admin/v1/orgs', { name: 'files', modules: ['analytics_qc'], rate_limit: { per_minute: 100_000, per_hour: 100_000 } });
    const user = await admin('POST', '/admin/v1/users', { email: `files-${randomBytes(4).toString('hex')}@example.org` });
    await admin('PUT', `/admin/v1/orgs/${org.id}/members/${user.id}`, { role: 'admin' });
    token = (await admin('POST', `/admin/v1/orgs/${org.id}/api-keys`, { name: 'files', scopes: ['read', 'write'], user_id: user.id })).token;
    // the gateway's caller context for this key's user, as each replica is asked directly
    caller = {
      org_id: org.id,
      user_id: user.id,
      role: 'admin',
      department_id: null,
      scopes: ['read', 'write'],
      token_kind: 'api_key',
      token_id: null,
      request_id: randomUUID(),
    };
  });

  afterAll(async () => {
    for (const c of clients) c.close();
    await cluster?.stop();
  });

  const api = async (base: string, method: string, path: string, body?: unknown) => {
    const r = await fetch(`${base}${path}`, {
      method,
      headers: { authorization: `Bearer ${token}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    return { status: r.status, body: (await r.json()) as { data: Record<string, any> } };
  };

  /** Clients of one process (replica) of a service, not of the service's target. */
  const kept = <C extends { close(): void }>(c: C): C => (clients.push(c), c);
  const telemetryReplica = (name: string) =>
    kept(new RpcClient<typeof telemetryWire.service>(telemetryWire.Client, cluster.grpcAddress(name), { secret: cluster.internalSecret }));
  const jobsReplica = (name: string) =>
    kept(new RpcClient<typeof jobs.JobsServiceService>(jobs.JobsServiceClient, cluster.grpcAddress(name), { secret: cluster.internalSecret }));

  /** Every byte of a server stream's `data`, and the metadata of its first message. */
  async function drain(stream: AsyncIterable<{ data: Buffer; size?: number; sha256?: string; filename?: string }>) {
    const parts: Buffer[] = [];
    let first: { size?: number; sha256?: string; filename?: string } | undefined;
    for await (const m of stream) {
      first ??= m;
      parts.push(Buffer.from(m.data));
    }
    return { bytes: Buffer.concat(parts), first: first! };
  }

  const sha256 = (b: Buffer) => createHash('sha256').update(b).digest('hex');

  /** Files under a process's data directory (the stores' directories among them), but for the embedded database's. */
  const filesIn = async (name: string) =>
    (await readdir(cluster.dataDirOf(name), { recursive: true, withFileTypes: true }).catch(() => [])).filter((e) => e.isFile()).map((e) => e.name);

  it('reads raw files uploaded through either gateway back from both telemetry replicas byte for byte', async () => {
    const device = (await api(cluster.url, 'POST', '/v1/devices', { name: 'Plate reader', identifier: `pr-${randomUUID()}` })).body.data;
    // sizes around the store's 512 KiB chunks: none, one byte, exactly one chunk, a few and a bit
    const sizes = [0, 1, 512 * 1024, 3 * MiB + 17];
    const uploaded: { id: string; bytes: Buffer }[] = [];
    for (const [i, size] of sizes.entries()) {
      const bytes = randomBytes(size);
      const form = new FormData();
      form.append('device_id', device.id as string);
      form.append('file', new Blob([bytes], { type: 'text/csv' }), `run-${i}.csv`);
      const r = await fetch(`${cluster.urls[i % 2]!}/v1/results/upload`, { method: 'POST', headers: { authorization: `Bearer ${token}` }, body: form });
      const answer = (await r.json()) as { data: { raw_file: { id: string; size: number; sha256: string } } };
      expect([r.status, answer.data.raw_file.size, answer.data.raw_file.sha256]).toEqual([201, size, sha256(bytes)]);
      uploaded.push({ id: answer.data.raw_file.id, bytes });
    }
    for (const name of cluster.replicasOf('telemetry')) {
      const client = telemetryReplica(name);
      for (const u of uploaded) {
        const read = await drain(client.stream('readRawFile', { id: u.id }, { ...caller, request_id: randomUUID() }));
        expect(read.bytes.equals(u.bytes)).toBe(true);
        expect([read.first.size, read.first.sha256]).toEqual([u.bytes.length, sha256(u.bytes)]);
      }
      // and none of it in the replica's own directory
      expect(await filesIn(name)).toEqual([]);
    }
  });

  it('downloads a job artifact written by one jobs replica from both, through either gateway', async () => {
    for (let i = 0; i < 3; i++) {
      const r = await api(cluster.url, 'POST', '/v1/samples', { name: `S-${i}`, type: 'blood', storage_location: 'box 1' });
      expect(r.status).toBe(201);
    }
    const job = await api(cluster.urls[1]!, 'POST', '/v1/jobs', { job_type: 'box_layout_pdf', input: { rows: 2, cols: 2, storage_location: 'box 1' } });
    expect(job.status).toBe(202);
    const done = await waitFor(
      'the job to succeed',
      async () => {
        const j = (await api(cluster.url, 'GET', `/v1/jobs/${job.body.data.id as string}`)).body.data;
        if (j.status === 'dead') throw new Error(`job died: ${j.error_message as string}`);
        return j.status === 'succeeded' ? j : undefined;
      },
      { timeoutMs: 60_000 },
    );
    const meta = done.result_meta as { size: number; sha256: string; content_type: string };
    expect(meta.content_type).toBe('application/pdf');
    for (const name of cluster.replicasOf('jobs')) {
      const read = await drain(jobsReplica(name).stream('readArtifact', { id: done.id as string }, { ...caller, request_id: randomUUID() }));
      expect([read.bytes.length, sha256(read.bytes), read.bytes.subarray(0, 5).toString()]).toEqual([meta.size, meta.sha256, '%PDF-']);
      expect(read.first.size).toBe(meta.size);
      // the worker's artifact is in no replica's directory (its scratch files are gone with the run)
      expect(await filesIn(name)).toEqual([]);
    }
    for (const base of cluster.urls) {
      const r = await fetch(`${base}/v1/jobs/${done.id as string}/artifact`, { headers: { authorization: `Bearer ${token}` } });
      const bytes = Buffer.from(await r.arrayBuffer());
      expect([r.status, sha256(bytes)]).toEqual([200, meta.sha256]);
    }
  });
});
