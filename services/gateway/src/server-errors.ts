import type { Response } from 'express';
import type { Logger } from '@lab/kit';
import { type FailureCause } from '@lab/http-api';

/**
 * Every 5xx the gateway answers is logged exactly once, when the answer has gone
 * out, with its request id, route, status and cause. Logged here rather than
 * where the error is caught: an error is caught in more than one place (the
 * pipeline's idempotent path, the request handler, the error middleware) and
 * some 5xx are answered without an error at all (a stream limit), but every
 * answer finishes once. A restart of a peer that answered 192 503s used to leave
 * no line at all.
 */

const CAUSE = Symbol('cause of a 5xx answer');
const REFUSAL = Symbol('body of a 4xx answer');
type WithCause = { [CAUSE]?: FailureCause; [REFUSAL]?: unknown };

/** Keeps the cause of the answer being sent, for the line written when it finishes. */
export function recordCause(res: Response, cause: FailureCause): void {
  (res as Response & WithCause)[CAUSE] = cause;
}

/** Keeps the body of a 4xx being sent (a reference, read only if debug lines are on). */
export function recordRefusal(res: Response, body: unknown): void {
  (res as Response & WithCause)[REFUSAL] = body;
}

/** The error code of a refusal's envelope, if it has one. */
function refusalCode(body: unknown): string | undefined {
  try {
    const parsed = JSON.parse(typeof body === 'string' ? body : Buffer.isBuffer(body) ? body.toString('utf8') : '') as { error?: { code?: unknown } | string };
    return typeof parsed.error === 'string' ? parsed.error : typeof parsed.error?.code === 'string' ? parsed.error.code : undefined;
  } catch {
    return undefined;
  }
}

/**
 * A line for each 4xx at debug level (LOG_LEVEL=debug): an integrator who quotes
 * the X-Request-Id of a refused request can then be answered from the log. Off by
 * default, as a client's mistakes are not the operator's, and a flood of them would
 * be the largest part of the log.
 */
export function logClientError(log: Logger, res: Response, req: FinishedRequest): void {
  if (req.status < 400 || req.status >= 500 || !log.isLevelEnabled('debug')) return;
  const code = refusalCode((res as Response & WithCause)[REFUSAL]);
  log.debug(
    { request_id: req.requestId, method: req.method, route: req.route, status: req.status, code },
    `${req.status} ${req.method} ${req.route}${code ? `: ${code}` : ''}`,
  );
}

export interface FinishedRequest {
  requestId: string;
  method: string;
  /** the route's path template, or 'unmatched' */
  route: string;
  status: number;
}

/** The one line of a finished 5xx answer (nothing for any other status). */
export function logServerError(log: Logger, res: Response, req: FinishedRequest): void {
  if (req.status < 500) return;
  const cause = (res as Response & WithCause)[CAUSE];
  const base = { request_id: req.requestId, method: req.method, route: req.route, status: req.status };
  if (!cause) {
    log.warn({ ...base, cause: { kind: 'unknown' } }, `${req.status} ${req.method} ${req.route}: no cause recorded`);
    return;
  }
  switch (cause.kind) {
    case 'upstream':
      // a peer's bug (500, its stack under cause.error_id in its own log) is an error; a peer away is a warning
      log[req.status === 500 ? 'error' : 'warn'](
        { ...base, cause },
        `${req.status} ${req.method} ${req.route}: ${cause.service} answered ${cause.grpc_code}${cause.grpc_details ? ` (${cause.grpc_details})` : ''}`,
      );
      return;
    case 'database':
      log.warn({ ...base, cause }, `${req.status} ${req.method} ${req.route}: gateway database: ${cause.err}`);
      return;
    case 'internal': {
      const { err, ...rest } = cause;
      log.error({ ...base, cause: rest, err }, `${req.status} ${req.method} ${req.route}: internal error ${cause.error_id}`);
      return;
    }
    case 'gateway':
      log.warn({ ...base, cause }, `${req.status} ${req.method} ${req.route}: ${cause.message}`);
      return;
  }
}
