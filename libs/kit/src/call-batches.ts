import { batch } from '@lab/contracts';
import { callerKey } from './caller-signing.js';
import type { CallerContext } from './context.js';
import { DomainError, fromStatusParts } from './errors.js';
import { metrics } from './metrics.js';

/** How one unary method's messages are written and read, and where it is called. */
export interface MethodCodec {
  path: string;
  serialize: (value: unknown) => Buffer;
  deserialize: (bytes: Buffer) => unknown;
}

const CALL_BATCH = batch.BatchServiceService.callBatch;
/** The batch method itself (lab.common.v1.BatchService/CallBatch). */
const BATCH_METHOD: MethodCodec = {
  path: CALL_BATCH.path,
  serialize: CALL_BATCH.requestSerialize as (value: unknown) => Buffer,
  deserialize: CALL_BATCH.responseDeserialize,
};

/** The most calls one batch holds; a server refuses more. */
export const MAX_BATCHED_CALLS = 32;

/**
 * After a peer answers a batch UNIMPLEMENTED (a replica of a version before
 * batches, during a rolling upgrade), calls go alone for this long.
 */
const REFUSED_BATCHES_MS = 60_000;

/** What the batches need of the client they belong to. */
export interface BatchTransport {
  readonly peer: string;
  /** sends one call as the client sends any (its wait for a connection, its retries), its outcome not counted */
  send(method: MethodCodec, request: unknown, caller: CallerContext, deadlineMs: number): Promise<unknown>;
  /** a call alone, its outcome counted: a batch of one, and every call while the peer refuses batches */
  alone(method: MethodCodec, request: unknown, caller: CallerContext, deadlineMs: number): Promise<unknown>;
  /** counts one call's outcome for the peer's availability (undefined: it succeeded) */
  settled(err: unknown): void;
}

interface Waiting {
  request: unknown;
  caller: CallerContext;
  resolve: (value: unknown) => void;
  reject: (err: unknown) => void;
}

interface Forming {
  method: MethodCodec;
  deadlineMs: number;
  calls: Waiting[];
  sent: boolean;
}

/**
 * Call batches: the calls of one caller to one method that begin in the same
 * turn of the event loop (the requests one read of the network brought in) go
 * to the peer as one call of lab.common.v1.BatchService, and each gets its own
 * answer or error back, as it would have alone. At saturation the gateway begins
 * about twenty reads of the same token per turn; on this kind of machine a gRPC
 * call's stream, metadata and framing cost the client about 130 us and the server
 * about 80, several times what a read by id costs (decision 042).
 *
 * Only what the client lists is batched, and only calls without an
 * Idempotency-Key (a keyed write's receipt and replay header belong to its own
 * call). A turn with one such call sends it alone, exactly as before. The batch
 * carries the first call's signed context (the same for all: same caller) and
 * each call's request id; it is one call for the wait for a connection, the
 * deadline and the refused-stream retries.
 */
export class CallBatches {
  private readonly forming = new Map<string, Forming>();
  private refusedUntil = 0;

  constructor(private readonly transport: BatchTransport) {}

  add(method: MethodCodec, request: unknown, caller: CallerContext, deadlineMs: number): Promise<unknown> {
    if (Date.now() < this.refusedUntil) return this.transport.alone(method, request, caller, deadlineMs);
    const key = `${method.path} ${deadlineMs} ${callerKey(caller)}`;
    let forming = this.forming.get(key);
    if (!forming) {
      const opened: Forming = { method, deadlineMs, calls: [], sent: false };
      this.forming.set(key, opened);
      setImmediate(() => this.send(key, opened));
      forming = opened;
    }
    const joined = forming;
    return new Promise((resolve, reject) => {
      joined.calls.push({ request, caller, resolve, reject });
      if (joined.calls.length >= MAX_BATCHED_CALLS) this.send(key, joined);
    });
  }

  private send(key: string, forming: Forming): void {
    if (this.forming.get(key) === forming) this.forming.delete(key);
    if (forming.sent) return;
    forming.sent = true;
    const { method, deadlineMs } = forming;
    if (forming.calls.length === 1) {
      const [only] = forming.calls as [Waiting];
      this.transport.alone(method, only.request, only.caller, deadlineMs).then(only.resolve, only.reject);
      return;
    }
    const calls: Waiting[] = [];
    const encoded: { request: Buffer; request_id: string }[] = [];
    for (const c of forming.calls) {
      try {
        encoded.push({ request: method.serialize(c.request), request_id: c.caller.request_id });
        calls.push(c);
      } catch (err) {
        // as grpc-js fails a call whose request it cannot write: that call alone
        c.reject(new DomainError('internal', 'internal_error', `request of ${method.path} not encoded: ${(err as Error).message}`));
      }
    }
    if (calls.length === 0) return;
    metrics().callBatches.inc({ peer: this.transport.peer });
    metrics().batchedCalls.inc({ peer: this.transport.peer }, calls.length);
    this.transport.send(BATCH_METHOD, { method: method.path, calls: encoded }, calls[0]!.caller, deadlineMs).then(
      (res) => this.answer(method, calls, res as batch.CallBatchResponse),
      (err: unknown) => {
        const status = err instanceof DomainError ? err.upstream?.grpc_code : undefined;
        // a peer without batches: these and the next calls go alone
        if (status === 'UNIMPLEMENTED') this.refusedUntil = Date.now() + REFUSED_BATCHES_MS;
        // and a batch whose answers together pass the largest message (each alone fits:
        // a failed call's status travels inside the batch, so only the transport says this)
        if (status === 'UNIMPLEMENTED' || status === 'RESOURCE_EXHAUSTED') {
          for (const c of calls) this.transport.alone(method, c.request, c.caller, deadlineMs).then(c.resolve, c.reject);
          return;
        }
        this.transport.settled(err);
        for (const c of calls) c.reject(copyOf(err));
      },
    );
  }

  /** Hands each call its own outcome; each counts for the peer's availability as a call alone would. */
  private answer(method: MethodCodec, calls: Waiting[], res: batch.CallBatchResponse): void {
    if (res.outcomes.length !== calls.length) {
      const err = new DomainError('internal', 'internal_error', `a batch of ${calls.length} calls of ${method.path} got ${res.outcomes.length} answers`);
      for (const c of calls) c.reject(copyOf(err));
      return;
    }
    calls.forEach((c, i) => {
      const outcome = res.outcomes[i]!.outcome;
      if (outcome?.$case === 'response') {
        let answer: unknown;
        try {
          answer = method.deserialize(outcome.value);
        } catch (err) {
          c.reject(new DomainError('internal', 'internal_error', `answer of ${method.path} not decoded: ${(err as Error).message}`));
          return;
        }
        this.transport.settled(undefined);
        c.resolve(answer);
        return;
      }
      const err = outcome
        ? fromStatusParts(outcome.value, this.transport.peer)
        : new DomainError('internal', 'internal_error', `no outcome for a call of ${method.path}`);
      this.transport.settled(err);
      c.reject(err);
    });
  }
}

/** One error per waiting call: a caller may add to the error it gets (its request's log fields). */
function copyOf(err: unknown): unknown {
  if (!(err instanceof DomainError)) return err;
  const copy = new DomainError(err.kind, err.code, err.message, err.details);
  copy.upstream = err.upstream;
  return copy;
}
