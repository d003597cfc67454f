import type { ServerResponse } from 'node:http';
import { jobJson } from '@lab/contracts';
import { DomainError, drainedOrGone } from '@lab/kit';
import { callerIn, principalIn, type Ctx, type Deps } from '../request.js';
import { objectBody, queryMap, recordId } from './records.js';
import { itemFromJson, JSON_TYPE, withLocation, type Reply } from '@lab/http-api';

/** POST /v1/jobs: 202 {data: Job}; the job runs later. */
export async function createJob(ctx: Ctx, deps: Deps): Promise<Reply> {
  const r = await deps.clients.jobs().call('createJob', { body: objectBody(ctx.body) }, callerIn(ctx));
  // 202 with where to follow the job (RFC 9110 15.3.3)
  return withLocation(itemFromJson(202, jobJson(r.job!)), ctx.req.path, r.job!.id);
}

/** GET /v1/jobs: {data, next_cursor, count}; next_cursor is the enqueued_at of the last item. */
export async function listJobs(ctx: Ctx, deps: Deps): Promise<Reply> {
  const query = queryMap(ctx.req.query);
  const r = await deps.clients.jobs().call('listJobs', { query }, callerIn(ctx));
  return {
    status: 200,
    body: `{"data":[${r.jobs.map(jobJson).join(',')}],"next_cursor":${JSON.stringify(r.next_cursor ?? null)},"count":${r.count}}`,
    contentType: JSON_TYPE,
  };
}

export async function getJob(ctx: Ctx, deps: Deps): Promise<Reply> {
  const r = await deps.clients.jobs().call('getJob', { id: recordId(ctx.params) }, callerIn(ctx));
  return itemFromJson(200, jobJson(r.job!));
}

/** Long enough for a large export on a slow link; the stream ends the call earlier. */
const ARTIFACT_DEADLINE_MS = 10 * 60_000;

/**
 * GET /v1/jobs/{id}/artifact: the jobs service streams the file in chunks over
 * gRPC (the gateway never reads another service's disk). The first chunk is
 * awaited before answering, so a missing job or artifact is an ordinary error.
 */
export async function jobArtifact(ctx: Ctx, deps: Deps): Promise<Reply> {
  const chunks = deps.clients.jobs().stream('readArtifact', { id: recordId(ctx.params) }, callerIn(ctx), ARTIFACT_DEADLINE_MS);
  const first = await chunks.next();
  if (first.done) throw DomainError.notFound('artifact not found');
  const head = first.value;
  const filename = (head.filename ?? 'artifact').replace(/[^A-Za-z0-9._-]/g, '_');
  const headers: Record<string, string> = { 'Content-Disposition': `attachment; filename="${filename}"` };
  if (head.size !== undefined) headers['Content-Length'] = String(head.size);
  return {
    status: 200,
    contentType: head.content_type ?? 'application/octet-stream',
    headers,
    stream: async (res: ServerResponse) => {
      // A client that goes away while the response is full emits 'close', never 'drain':
      // after it the loop below sees res.destroyed and breaks, which returns the
      // generator and so cancels the gRPC call.
      const write = async (data: Uint8Array) => {
        if (data.length && !res.write(data)) await drainedOrGone(res);
      };
      await write(head.data);
      for await (const c of chunks) {
        if (res.destroyed) break;
        await write(c.data);
      }
      res.end();
    },
  };
}

/** GET /v1/realtime/background_jobs: server-sent job.updated events the caller may see. */
export async function realtimeJobs(ctx: Ctx, deps: Deps): Promise<Reply> {
  const principal = principalIn(ctx);
  deps.jobEvents.admit(principal);
  return {
    status: 200,
    contentType: 'text/event-stream; charset=utf-8',
    headers: { 'Cache-Control': 'no-cache, no-transform', Connection: 'keep-alive', 'X-Accel-Buffering': 'no' },
    stream: (res: ServerResponse) => deps.jobEvents.attach(principal, res),
  };
}
