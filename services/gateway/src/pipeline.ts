import type { Request } from 'express';
import { DomainError, IDEMPOTENCY_KEY_CONFLICT, metrics, requestScope } from '@lab/kit';
import { runFunction } from '@lab/functions';
import { callerOf, operatorCaller } from './auth.js';
import { clientAddress } from './client-address.js';
import { adminHandler } from './handlers/admin.js';
import { calendarHandler } from './handlers/calendar.js';
import { listAudit, verifyAuditChain } from './handlers/audit.js';
import { experimentHandler } from './handlers/experiments.js';
import { labOrderHandler } from './handlers/lab-orders.js';
import { createJob, getJob, jobArtifact, listJobs, realtimeJobs } from './handlers/jobs.js';
import { createNotifications, listNotifications, updateNotification } from './handlers/notifications.js';
import { health, openapi, ping } from './handlers/meta.js';
import { recordHandler, recordId } from './handlers/records.js';
import { uploadRawFile } from './handlers/raw-upload.js';
import { telemetryAdminHandler, telemetryHandler } from './handlers/telemetry.js';
import { signExperiment, tokenGrant } from './handlers/user.js';
import { inboundWebhookHandler, webhooksAdminHandler } from './handlers/webhooks.js';
import { listDeadLetters, replayDeadLetter } from './handlers/dead-letters.js';
import { parseIdempotencyKey, requestHash, type IdempotencyScope } from './idempotency.js';
import { countedOperator, DEFAULT_LIMITS } from '@lab/rate-limits';
import type { Ctx, Deps } from './request.js';
import { hasScope, honoursTestMode, missingScopeMessage, type RouteHandler, errorReply, type Reply } from '@lab/http-api';
import { isTestMode, testModeReply } from './test-mode.js';

/**
 * Everything a matched route goes through, in order: authentication and rate limit
 * (`authenticate`, before the body is read), then scope, module, service
 * availability, X-Test-Mode, idempotency, the handler (`runRoute`).
 */
export async function runRoute(ctx: Ctx, deps: Deps): Promise<Reply> {
  const counting = ctx.counting;
  if (!counting) return authorizedRoute(ctx, deps);
  // A read ran beside its count: the count decides first (429 over the limit,
  // whatever the read answered), then the read's outcome goes out with its headers.
  const [outcome, count] = await Promise.allSettled([authorizedRoute(ctx, deps), counting]);
  if (count.status === 'rejected') throw count.reason;
  ctx.rate = count.value;
  if (outcome.status === 'rejected') throw outcome.reason;
  return outcome.value;
}

async function authorizedRoute(ctx: Ctx, deps: Deps): Promise<Reply> {
  const { route, req } = ctx;
  const p = ctx.principal;
  if (p) {
    if (route.scope !== 'none' && !hasScope(p.scopes, route.scope)) {
      throw DomainError.forbidden(missingScopeMessage(route.scope), 'insufficient_scope', { required_scope: route.scope });
    }
    if (route.module && !p.modules.includes(route.module)) {
      throw DomainError.forbidden(`the ${route.module} module is not enabled for this organisation`, 'module_not_enabled', {
        module: route.module,
      });
    }
  }
  if (route.handler.kind === 'pending' || (route.service && !deps.clients.has(route.service))) {
    throw DomainError.unavailable(`${req.method} ${route.path} is not available in this deployment`);
  }
  const h = route.handler;
  // X-Test-Mode belongs to the generic CRUD handler only: not to nested records, not to stock movements
  if (honoursTestMode(h) && p && isTestMode(req.headers['x-test-mode'])) {
    return testModeReply(p, h.op, h.resource, h.op === 'create' ? undefined : recordId(ctx.params), ctx.body);
  }
  if (route.idempotent && p) {
    const key = parseIdempotencyKey(req.headers['idempotency-key']);
    if (key !== undefined) return idempotent(ctx, deps, { org_id: p.org_id, token_id: p.token_id, key }, req);
  }
  return dispatch(ctx, deps, h);
}

/** Who is calling, and the count of their request against the token's limit. */
export async function authenticate(ctx: Ctx, deps: Deps): Promise<void> {
  const { route, req, requestId } = ctx;
  switch (route.auth) {
    case 'none':
      return;
    case 'operator':
      await countedOperator(deps.limiter, clientAddress(req), () => deps.auth.operator(req));
      ctx.caller = operatorCaller(requestId, ctx.params.org_id?.toLowerCase() ?? null);
      return;
    case 'bearer':
    case 'session': {
      const p = route.auth === 'bearer' ? await deps.auth.publicApi(req, requestId) : await deps.auth.session(req, requestId);
      ctx.principal = p;
      ctx.caller = callerOf(p, requestId);
      // Counted before the scope check, so refused requests carry the headers too.
      const counting = deps.limiter.consume(p.token_id, p.rate_limit ?? DEFAULT_LIMITS);
      // A read has no effect to hold back: while the token is well under its limit it
      // runs beside its count instead of after it (the counter's round trip was most
      // of what the limit added to a read's latency). Writes always wait for their count.
      if (route.method === 'GET' && deps.limiter.mayOverlap(p.token_id)) {
        counting.catch(() => undefined);
        ctx.counting = counting;
        return;
      }
      ctx.rate = await counting;
      return;
    }
  }
}

/**
 * A keyed request (the rules: the kit's receipts.ts). A refusal kept here for the
 * key is replayed; otherwise the request runs with its key and hash, and the
 * owning service's receipt makes its write happen once: a duplicate's call is
 * answered from the receipt (the service says so in the call's response
 * headers, and the answer goes out marked as a replay), or with the 409.
 */
async function idempotent(ctx: Ctx, deps: Deps, scope: IdempotencyScope, req: Request): Promise<Reply> {
  const hash = requestHash(req.method, req.path, ctx.body);
  // A success this replica answered for the request (AnsweredKeys). Before the
  // refusals: a key with a success has no refusal of the same request (its
  // duplicates are answered from the receipt), and another request under it goes on.
  const answered = deps.answered.replay(scope, hash);
  if (answered) {
    metrics().idempotentReplays.inc();
    return answered;
  }
  const refused = await deps.idempotency.replay(scope, hash).catch((err: unknown) => {
    // a key used with another request is the client's (409); anything else is the
    // gateway's own record of refusals not read: the request answers 503
    if (!(err instanceof DomainError)) metrics().idempotencyStoreErrors.inc({ operation: 'read' });
    throw err;
  });
  if (refused) {
    metrics().idempotentReplays.inc();
    return refused;
  }
  if (ctx.caller) ctx.caller = { ...ctx.caller, idempotency_key: scope.key, request_hash: hash };
  let reply: Reply;
  // the 409 about the key itself (a receipt of another request) is never kept: it is not this request's outcome
  let keyConflict = false;
  try {
    reply = await dispatch(ctx, deps, ctx.route.handler);
  } catch (err) {
    keyConflict = err instanceof DomainError && err.code === IDEMPOTENCY_KEY_CONFLICT;
    reply = errorReply(err);
  }
  deps.answered.remember(scope, hash, reply);
  if (requestScope.getStore()?.replayed && reply.status < 300) {
    metrics().idempotentReplays.inc();
    return { ...reply, headers: { ...reply.headers, 'Idempotent-Replay': 'true' } };
  }
  // A refusal wrote nothing, so no service kept it: kept here, while the answer
  // goes out (a retry arriving first runs again, and is refused alike).
  if (reply.status >= 400 && reply.status < 500 && !keyConflict && !reply.stream) {
    deps.idempotency.rememberInBackground(scope, hash, reply, (err) => {
      metrics().idempotencyStoreErrors.inc({ operation: 'keep' });
      deps.log.error({ err }, 'could not keep the refusal of a keyed request');
    });
  }
  return reply;
}

function dispatch(ctx: Ctx, deps: Deps, h: RouteHandler): Promise<Reply> {
  switch (h.kind) {
    case 'health':
      return health();
    case 'ping':
      return ping(ctx, deps);
    case 'openapi':
      return openapi();
    case 'record':
      return recordHandler(ctx, deps, h.op, h.resource, h.nested);
    case 'audit':
      return listAudit(ctx, deps);
    case 'audit_verify':
      return verifyAuditChain(ctx, deps);
    case 'admin':
      return adminHandler(ctx, deps, h.action);
    case 'token_grant':
      return tokenGrant(ctx, deps);
    case 'sign_experiment':
      return signExperiment(ctx, deps);
    case 'experiment':
      return experimentHandler(ctx, deps, h.op);
    case 'notifications':
      return h.op === 'create' ? createNotifications(ctx, deps) : h.op === 'list' ? listNotifications(ctx, deps) : updateNotification(ctx, deps);
    case 'jobs':
      return { create: createJob, list: listJobs, get: getJob, artifact: jobArtifact }[h.op](ctx, deps);
    case 'realtime_jobs':
      return realtimeJobs(ctx, deps);
    case 'oauth_authorize':
    case 'oauth_token':
    case 'oauth_metadata':
    case 'idp_oauth':
    case 'mcp':
      return runFunction(h, ctx, deps.functions);
    case 'webhooks_admin':
      return webhooksAdminHandler(ctx, deps, h.action);
    case 'inbound_webhook':
      return inboundWebhookHandler(ctx, deps);
    case 'telemetry':
      return telemetryHandler(ctx, deps, h.op);
    case 'telemetry_admin':
      return telemetryAdminHandler(ctx, deps, h.op);
    case 'raw_upload':
      return uploadRawFile(ctx, deps);
    case 'lab_orders':
      return labOrderHandler(ctx, deps, h.op);
    case 'dead_letters':
      return h.op === 'list' ? listDeadLetters(ctx, deps) : replayDeadLetter(ctx, deps);
    case 'calendar':
      return calendarHandler(ctx, deps, h.op);
    case 'pending':
      throw DomainError.unavailable();
  }
}
