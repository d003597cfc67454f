import { Metadata, status as GrpcStatus, type ServiceError } from '@grpc/grpc-js';
import { randomUUID } from 'node:crypto';

/**
 * The one error type of domain code. `kind` says what went wrong in transport-
 * neutral terms; `code` is the machine-readable code of the spec's error
 * envelope (validation_failed, insufficient_scope, ...). The mapping to gRPC and
 * to HTTP lives only in the table below.
 */
export type ErrorKind =
  | 'invalid'
  | 'unauthenticated'
  | 'forbidden'
  | 'not_found'
  | 'method_not_allowed'
  | 'conflict'
  | 'too_large'
  | 'unprocessable'
  | 'rate_limited'
  | 'unavailable'
  | 'timeout'
  | 'internal';

/** Where an error a client got came from: the peer it called and the gRPC status it got. */
export interface UpstreamCause {
  /** the peer service called (its configured name in the peer table) */
  service: string;
  /** gRPC status name, e.g. UNAVAILABLE */
  grpc_code: string;
  /** the status's details text as the client got it (grpc-js's own for a transport failure) */
  grpc_details: string;
}

export class DomainError extends Error {
  override name = 'DomainError';
  /** set on the client side of a gRPC call: what the peer (or the transport) answered */
  upstream?: UpstreamCause;
  constructor(
    readonly kind: ErrorKind,
    readonly code: string,
    message: string,
    readonly details?: Record<string, unknown>,
  ) {
    super(message);
  }

  static invalid(message: string, details?: Record<string, unknown>, code = 'validation_failed') {
    return new DomainError('invalid', code, message, details);
  }
  static notFound(message = 'not found', code = 'not_found') {
    return new DomainError('not_found', code, message);
  }
  static forbidden(message: string, code = 'forbidden', details?: Record<string, unknown>) {
    return new DomainError('forbidden', code, message, details);
  }
  static conflict(message: string, code = 'conflict', details?: Record<string, unknown>) {
    return new DomainError('conflict', code, message, details);
  }
  static unauthenticated(message = 'missing or invalid bearer token', code = 'unauthorized') {
    return new DomainError('unauthenticated', code, message);
  }
  static unprocessable(message: string, code = 'unprocessable', details?: Record<string, unknown>) {
    return new DomainError('unprocessable', code, message, details);
  }
  static unavailable(message = 'a backing service is unavailable', code = 'service_unavailable') {
    return new DomainError('unavailable', code, message);
  }
}

interface KindRow {
  grpc: GrpcStatus;
  http: number;
}

/** The single status table (after grpc-gateway's runtime/errors.go, plus 405/413/422). */
const TABLE: Record<ErrorKind, KindRow> = {
  invalid: { grpc: GrpcStatus.INVALID_ARGUMENT, http: 400 },
  unauthenticated: { grpc: GrpcStatus.UNAUTHENTICATED, http: 401 },
  forbidden: { grpc: GrpcStatus.PERMISSION_DENIED, http: 403 },
  not_found: { grpc: GrpcStatus.NOT_FOUND, http: 404 },
  method_not_allowed: { grpc: GrpcStatus.UNIMPLEMENTED, http: 405 },
  conflict: { grpc: GrpcStatus.ALREADY_EXISTS, http: 409 },
  too_large: { grpc: GrpcStatus.OUT_OF_RANGE, http: 413 },
  unprocessable: { grpc: GrpcStatus.FAILED_PRECONDITION, http: 422 },
  rate_limited: { grpc: GrpcStatus.RESOURCE_EXHAUSTED, http: 429 },
  unavailable: { grpc: GrpcStatus.UNAVAILABLE, http: 503 },
  timeout: { grpc: GrpcStatus.DEADLINE_EXCEEDED, http: 504 },
  internal: { grpc: GrpcStatus.INTERNAL, http: 500 },
};

const KIND_BY_GRPC = new Map<number, ErrorKind>((Object.entries(TABLE) as [ErrorKind, KindRow][]).map(([k, v]) => [v.grpc, k]));
KIND_BY_GRPC.set(GrpcStatus.ABORTED, 'conflict');
KIND_BY_GRPC.set(GrpcStatus.CANCELLED, 'unavailable');

export const httpStatusOf = (kind: ErrorKind): number => TABLE[kind].http;
export const grpcStatusOf = (kind: ErrorKind): GrpcStatus => TABLE[kind].grpc;

const ERROR_KEY = 'lab-error-bin';

export interface ErrorBody {
  code: string;
  message: string;
  details?: Record<string, unknown>;
}

/**
 * Turns anything thrown inside a handler into a gRPC error. Unknown errors become
 * INTERNAL with an error id; their cause goes to the log only.
 */
export function toServiceError(err: unknown, log?: (e: unknown, errorId: string) => void): Partial<ServiceError> {
  const metadata = new Metadata();
  let body: ErrorBody;
  let code: GrpcStatus;
  if (err instanceof DomainError) {
    body = { code: err.code, message: err.message, ...(err.details ? { details: err.details } : {}) };
    code = grpcStatusOf(err.kind);
  } else if (retryLater(err)) {
    body = retryLater(err)!;
    code = GrpcStatus.UNAVAILABLE;
    log?.(err, body === CONCURRENCY_ABORT ? 'concurrency-abort' : 'db-unavailable');
  } else {
    const errorId = randomUUID();
    log?.(err, errorId);
    body = { code: 'internal_error', message: 'internal error', details: { error_id: errorId } };
    code = GrpcStatus.INTERNAL;
  }
  metadata.set(ERROR_KEY, Buffer.from(JSON.stringify(body)));
  return { code, details: body.message, metadata };
}

/**
 * Rebuilds the DomainError on the client side of a gRPC call; `peer` names the
 * service called, kept with the gRPC status as the error's upstream cause.
 */
export function fromServiceError(err: ServiceError, peer?: string): DomainError {
  // a ServiceError made by hand (not by grpc-js) may come without metadata or details
  /* eslint-disable @typescript-eslint/no-unnecessary-condition -- see above */
  return errorOfStatus(err.code, err.details ?? '', (err.metadata as Metadata | undefined)?.get(ERROR_KEY)[0], peer);
  /* eslint-enable @typescript-eslint/no-unnecessary-condition */
}

/**
 * A status as plain parts: how one call of a batch carries its failure
 * (lab.common.v1.BatchedError) where a call alone has its status and trailer.
 */
export interface StatusParts {
  code: number;
  message: string;
  /** the error body of the lab-error-bin trailer (JSON), empty when there was none */
  body: Buffer;
}

/** The parts of a status toServiceError made. */
export function statusParts(err: Partial<ServiceError>): StatusParts {
  const raw = err.metadata?.get(ERROR_KEY)[0];
  return { code: err.code ?? GrpcStatus.UNKNOWN, message: err.details ?? '', body: Buffer.isBuffer(raw) ? raw : Buffer.from(raw ?? '') };
}

/** The DomainError a client rebuilds from a status's parts: the same as fromServiceError of that status. */
export function fromStatusParts(parts: StatusParts, peer?: string): DomainError {
  return errorOfStatus(parts.code, parts.message, parts.body.length ? parts.body : undefined, peer);
}

function errorOfStatus(code: number, details: string, body: string | Buffer | undefined, peer: string | undefined): DomainError {
  const out = domainErrorOf(code, details, body);
  if (peer)
    out.upstream = {
      service: peer,
      // a code grpc-js has no name for
      grpc_code: GrpcStatus[code] ?? String(code),
      grpc_details: details,
    };
  return out;
}

function domainErrorOf(code: number, details: string, raw: string | Buffer | undefined): DomainError {
  const kind = KIND_BY_GRPC.get(code) ?? 'internal';
  if (raw) {
    try {
      const body = JSON.parse(Buffer.isBuffer(raw) ? raw.toString('utf8') : raw) as ErrorBody;
      return new DomainError(kind, body.code, body.message, body.details);
    } catch {
      /* fall through to a generic error */
    }
  }
  if (kind === 'unavailable' || kind === 'timeout') {
    return new DomainError(kind, kind === 'timeout' ? 'timeout' : 'service_unavailable', 'a backing service did not answer');
  }
  return new DomainError(kind, kind === 'internal' ? 'internal_error' : kind, details || 'error');
}

/** What a client is told of a write PostgreSQL rolled back for a concurrent one. */
export const CONCURRENCY_ABORT = {
  code: 'service_unavailable',
  message: 'the request ran into a concurrent one and was rolled back; nothing of it was kept, try it again',
} as const;
const DATABASE_AWAY = { code: 'service_unavailable', message: 'the database is unavailable, try again' } as const;

/**
 * The 503 body of an error that is no bug but a reason to try again (the
 * database away, a transaction rolled back for a concurrent one), or undefined.
 * The services' gRPC answers and the gateway's own errors both use it.
 */
export function retryLater(err: unknown): typeof CONCURRENCY_ABORT | typeof DATABASE_AWAY | undefined {
  if (isTransientDbError(err)) return DATABASE_AWAY;
  if (isConcurrencyAbort(err)) return CONCURRENCY_ABORT;
  return undefined;
}

/** Whether the error, or one it wraps (the query layer wraps the driver's), passes `test`. */
function inCauses(err: unknown, test: (e: { code?: string; message?: string }) => boolean): boolean {
  let e = err as { code?: string; message?: string; cause?: unknown } | null | undefined;
  for (let depth = 0; e && typeof e === 'object' && depth < 4; depth++, e = e.cause as typeof e) if (test(e)) return true;
  return false;
}

/**
 * A transaction PostgreSQL aborted to let a concurrent one go on (deadlock 40P01,
 * serialization failure 40001): nothing of it was kept, and the same request
 * again will pass. The writes take their locks in one order so this should not
 * happen; when it does, it is a 503 to retry, not a 500.
 */
export const isConcurrencyAbort = (err: unknown): boolean => inCauses(err, (e) => e.code === '40P01' || e.code === '40001');

/**
 * A failure that says nothing about the message or request being handled: the
 * database or a peer is away for now, or a concurrent transaction won. A consumer
 * retries such a failure for as long as it lasts, without counting it toward the
 * attempts after which a message is parked as one that cannot be handled.
 */
export function isTransientFailure(err: unknown): boolean {
  if (err instanceof DomainError) return err.kind === 'unavailable' || err.kind === 'timeout';
  return isTransientDbError(err) || isConcurrencyAbort(err);
}

/** PostgreSQL / network failures that mean "try again later", not a bug. */
// drizzle wraps the driver's error (DrizzleQueryError "Failed query: ...", cause =
// the pg error): without following the cause a database outage answered 500.
const DB_AWAY_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', '57P01', '57P02', '57P03', '08000', '08003', '08006', '53300']);
export const isTransientDbError = (err: unknown): boolean =>
  inCauses(
    err,
    (e) => DB_AWAY_CODES.has(e.code ?? '') || /Connection terminated|connection timeout|Client has encountered a connection error/i.test(e.message ?? ''),
  );
