import { randomUUID } from 'node:crypto';
import type { Response } from 'express';
import { DomainError, errText, httpStatusOf, retryLater, type Logger } from '@lab/kit';

/**
 * What a handler answers, before it is written: a status, a JSON body already
 * serialised (record bodies are spliced around the service's JSON text, never
 * parsed and re-stringified), and extra headers. Idempotency stores exactly this.
 */
export interface Reply {
  status: number;
  body?: string;
  contentType?: string;
  headers?: Record<string, string>;
  /**
   * A streamed body (artifact downloads, server-sent events): written after
   * status and headers; never stored for idempotency (no such route is idempotent).
   */
  stream?: (res: Response) => Promise<void>;
}

const JSON_TYPE = 'application/json; charset=utf-8';

export const json = (status: number, value: unknown, headers?: Record<string, string>): Reply => ({
  status,
  body: JSON.stringify(value),
  contentType: JSON_TYPE,
  headers,
});

/** Item envelope around a JSON object text. */
export const itemFromJson = (status: number, objectJson: string): Reply => ({
  status,
  body: `{"data":${objectJson}}`,
  contentType: JSON_TYPE,
});

/** Where a list read by keyset goes on (records after since_created_at and since_id). */
export interface ListCursor {
  since_created_at: string;
  since_id: string;
}

/** List envelope around a JSON array text. */
export const listFromJson = (
  arrayJson: string,
  page: { limit: number; offset: number; total: number | null; next_cursor?: ListCursor | null },
): Reply => ({
  status: 200,
  body: `{"data":${arrayJson},"pagination":${JSON.stringify(page)}}`,
  contentType: JSON_TYPE,
});

export const noContent = (): Reply => ({ status: 204 });

/** The spec's one exception to the error envelope (a plain-string error). */
const IDEMPOTENCY_CONFLICT = 'idempotency_key_conflict';

/**
 * The one place where errors become HTTP answers: DomainErrors through kit's
 * status table into the error envelope; anything else is a 500 with an error id,
 * its cause logged only.
 */
export function errorReply(err: unknown, log: Logger): Reply {
  if (err instanceof DomainError) {
    const status = httpStatusOf(err.kind);
    if (err.code === IDEMPOTENCY_CONFLICT) {
      return json(status, { data: null, error: IDEMPOTENCY_CONFLICT, meta: { message: err.message } });
    }
    if (status >= 500 && err.kind === 'internal') log.error({ err }, 'internal error from a service');
    const headers = err.kind === 'rate_limited' ? { 'Retry-After': '60' } : undefined;
    return json(status, { error: { code: err.code, message: err.message, ...(err.details ? { details: err.details } : {}) } }, headers);
  }
  // The gateway's own database (idempotency records, sessions) being away is an
  // outage to retry, not a bug: 503 like the services answer, not 500.
  const retry = retryLater(err);
  if (retry) {
    log.warn({ err: errText(err) }, retry.message);
    return json(503, { error: retry });
  }
  const errorId = randomUUID();
  log.error({ err, error_id: errorId }, 'unhandled error');
  return json(500, { error: { code: 'internal_error', message: 'internal error', details: { error_id: errorId } } });
}

export function send(res: Response, reply: Reply): void {
  if (reply.headers) for (const [k, v] of Object.entries(reply.headers)) res.setHeader(k, v);
  res.status(reply.status);
  if (reply.stream) {
    if (reply.contentType) res.setHeader('Content-Type', reply.contentType);
    reply.stream(res).catch(() => res.destroy());
    return;
  }
  if (reply.body === undefined || reply.status === 204) {
    res.end();
    return;
  }
  res.setHeader('Content-Type', reply.contentType ?? JSON_TYPE);
  res.end(reply.body);
}
