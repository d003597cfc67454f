import { randomUUID } from 'node:crypto';
import type { ServerResponse } from 'node:http';
import { type JsonText } from '@lab/contracts';
import { DomainError, errText, httpStatusOf, IDEMPOTENCY_KEY_CONFLICT, retryLater, utf8Concat } from '@lab/kit';

/**
 * The answers of the HTTP API before they are written: the spec's envelopes
 * (item, list, error) and the cause of a 5xx. Writing one to a response is the
 * gateway's (its replies.ts).
 */

/**
 * What a handler answers, before it is written: a status, a JSON body already
 * serialised (record bodies are spliced around the service's JSON text, never
 * parsed and re-stringified), and extra headers. Idempotency stores exactly this.
 */
export interface Reply {
  status: number;
  /** the text, or its UTF-8 bytes when it was written in pieces (a large answer: see JsonText) */
  body?: string | Buffer;
  contentType?: string;
  headers?: Record<string, string>;
  /**
   * A streamed body (artifact downloads, server-sent events): written after
   * status and headers; never stored for idempotency (no such route is idempotent).
   */
  stream?: (res: ServerResponse) => Promise<void>;
  /**
   * Why a 5xx was answered: logged once when the answer has gone out
   * (the gateway's server-errors.ts), never sent nor stored.
   */
  cause?: FailureCause;
}

/**
 * The cause of a 5xx answer. `upstream`: a peer service answered an error (or
 * could not be reached) over gRPC; `database`: the gateway's own database is
 * away or rolled back for a concurrent write; `internal`: a bug (its error id
 * is in the answer); `gateway`: the gateway refused by itself (the route's
 * service is not part of this deployment, too many streams).
 */
export type FailureCause =
  | { kind: 'upstream'; service: string; grpc_code: string; grpc_details: string; error_code: string; error_id?: string }
  | { kind: 'database'; err: string; error_code: string }
  | { kind: 'internal'; err: unknown; error_id: string }
  | { kind: 'gateway'; error_code: string; message: string };

/** The content type of a JSON answer (a reply that names none is JSON). */
export const JSON_TYPE = 'application/json; charset=utf-8';

export const json = (status: number, value: unknown, headers?: Record<string, string>): Reply => ({
  status,
  body: JSON.stringify(value),
  contentType: JSON_TYPE,
  headers,
});

/**
 * A created (201) or accepted (202) answer with the Location of what it made:
 * `base` is the collection's or item's path, `id` the new resource's id below it
 * (none: the resource is at `base` itself, as the one record of a parent is).
 * A replay of the request computes the same Location from the same answer.
 */
export function withLocation(reply: Reply, base: string, id?: string): Reply {
  const at = base.replace(/\/+$/, '');
  return { ...reply, headers: { ...reply.headers, Location: id === undefined ? at : `${at}/${encodeURIComponent(id)}` } };
}

/**
 * `head`, the text and `tail` as a body: one string, or for a text in pieces their
 * UTF-8 bytes copied into one buffer (never one large string: see JsonText).
 */
export function jsonBody(head: string, text: JsonText, tail: string): string | Buffer {
  return typeof text === 'string' ? `${head}${text}${tail}` : utf8Concat([head, ...text, tail]);
}

/** A reply's body as text (undefined when it has none). */
export const bodyText = (reply: Reply): string | undefined =>
  typeof reply.body === 'string' || reply.body === undefined ? reply.body : reply.body.toString('utf8');

/** Item envelope around a JSON object text. */
export const itemFromJson = (status: number, objectJson: JsonText): Reply => ({
  status,
  body: jsonBody('{"data":', objectJson, '}'),
  contentType: JSON_TYPE,
});

/** Where a list read by keyset goes on (records after since_created_at and since_id). */
export interface ListCursor {
  since_created_at: string;
  since_id: string;
}

/** List envelope around a JSON array text. */
export const listFromJson = (arrayJson: JsonText, page: { limit: number; offset: number; total: number | null; next_cursor?: ListCursor | null }): Reply => ({
  status: 200,
  body: jsonBody('{"data":', arrayJson, `,"pagination":${JSON.stringify(page)}}`),
  contentType: JSON_TYPE,
});

export const noContent = (): Reply => ({ status: 204 });

/**
 * The one place where errors become HTTP answers: DomainErrors through kit's
 * status table into the error envelope; anything else is a 500 with an error id,
 * its cause logged only.
 */
export function errorReply(err: unknown): Reply {
  if (err instanceof DomainError) {
    const status = httpStatusOf(err.kind);
    // the spec's one exception to the error envelope (a plain-string error)
    if (err.code === IDEMPOTENCY_KEY_CONFLICT) {
      return json(status, { data: null, error: IDEMPOTENCY_KEY_CONFLICT, meta: { message: err.message } });
    }
    const headers = err.kind === 'rate_limited' ? { 'Retry-After': '60' } : undefined;
    const reply = json(status, { error: { code: err.code, message: err.message, ...(err.details ? { details: err.details } : {}) } }, headers);
    if (status >= 500) reply.cause = causeOf(err);
    return reply;
  }
  // The gateway's own database (idempotency records, sessions) being away is an
  // outage to retry, not a bug: 503 like the services answer, not 500.
  const retry = retryLater(err);
  if (retry) return { ...json(503, { error: retry }), cause: { kind: 'database', err: errText(err), error_code: retry.code } };
  const errorId = randomUUID();
  return {
    ...json(500, { error: { code: 'internal_error', message: 'internal error', details: { error_id: errorId } } }),
    cause: { kind: 'internal', err, error_id: errorId },
  };
}

/** The cause of a 5xx answered for a DomainError (a handler answering 503 in a shape of its own keeps it too). */
export function causeOf(err: DomainError): FailureCause {
  if (err.upstream) {
    // a service's own 500 carries the error id its log has the stack under
    const errorId = typeof err.details?.error_id === 'string' ? err.details.error_id : undefined;
    return { kind: 'upstream', ...err.upstream, error_code: err.code, ...(errorId ? { error_id: errorId } : {}) };
  }
  return { kind: 'gateway', error_code: err.code, message: err.message };
}
