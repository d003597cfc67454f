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
type WithCause = { [CAUSE]?: FailureCause };

/** Keeps the cause of the answer being sent, for the line written when it finishes. */
export function recordCause(res: Response, cause: FailureCause): void {
  (res as Response & WithCause)[CAUSE] = cause;
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
