import {
  ChannelCredentials,
  connectivityState,
  Metadata,
  Server,
  status,
  ServerCredentials,
  type ServiceDefinition,
  type ServiceError,
  type ServerUnaryCall,
  type ServerWritableStream,
  type ServerReadableStream,
  type ClientWritableStream,
  type sendUnaryData,
  type Client,
  type UntypedServiceImplementation,
} from '@grpc/grpc-js';
import { PassThrough } from 'node:stream';
import { HealthImplementation } from 'grpc-health-check';
import { batch } from '@lab/contracts';
import type { CallerContext } from './context.js';
import { callScope, isSaneRequestId, requestScope } from './context.js';
import { signCallerContext, verifyCallerContext } from './caller-signing.js';
import { DomainError, fromServiceError, isTransientFailure, statusParts, toServiceError } from './errors.js';
import type { Logger } from './logger.js';
import { metrics } from './metrics.js';
import { OutageLog } from './outage-log.js';
import type { Receipts } from './receipts.js';
import { drainedOrGone } from './waits.js';
import { http2ServersOf } from './adapters/grpc-js.js';
import { releaseClosedHttp2Streams } from './http2-release.js';
import { releaseAnsweredCall } from './answered-call.js';
import { CallBatches, MAX_BATCHED_CALLS, type MethodCodec } from './call-batches.js';
import { tracingOn } from './tracing.js';

/** Request type of a method in a ts-proto service definition. */
type ReqOf<M> = M extends { requestDeserialize: (b: Buffer) => infer R } ? R : never;
type ResOf<M> = M extends { responseSerialize: (v: infer R) => Buffer } ? R : never;

/** A client-streaming method's handler reads its requests as an async iterable. */
type InputOf<M> = M extends { requestStream: true } ? AsyncIterable<ReqOf<M>> : ReqOf<M>;

/**
 * Handlers of a service: plain async functions of (request, caller); a
 * server-streaming method returns an async iterable of its messages instead.
 */
export type Handlers<D> = {
  [K in keyof D]: D[K] extends { responseStream: true }
    ? (req: ReqOf<D[K]>, caller: CallerContext) => AsyncIterable<ResOf<D[K]>>
    : (req: InputOf<D[K]>, caller: CallerContext) => Promise<ResOf<D[K]>>;
};

interface Definition {
  [method: string]: {
    path: string;
    requestStream: boolean;
    responseStream: boolean;
    requestDeserialize?: (bytes: Buffer) => unknown;
    responseSerialize?: (value: never) => Buffer;
    responseDeserialize?: (bytes: Buffer) => unknown;
  };
}

/** A unary method as a batch runs it: its handler and how its messages are read and written. */
interface UnaryMethod {
  handler: (req: unknown, c: CallerContext) => Promise<unknown>;
  decode: (bytes: Buffer) => unknown;
  encode: (value: unknown) => Buffer;
}

/** How a method's answers are written and read (for receipts of keyed calls). */
interface AnswerCodec {
  encode: (value: unknown) => Buffer;
  decode: (bytes: Buffer) => unknown;
}

/** How a handler's call ended: its answer, or its failure and the status it maps to. */
/** `replayed`: the answer is a keyed call's first answer, given again from its receipt. */
type Outcome = { ok: true; res: unknown; replayed?: boolean } | { ok: false; err: unknown; mapped: ServiceError };

/**
 * Response metadata of a keyed call answered from its receipt (receipts.ts): the
 * gateway marks its HTTP answer `Idempotent-Replay: true`.
 */
const REPLAYED_KEY = 'x-lab-replayed';

/** A client-streaming handler as a server of this process runs it. */
type LocalClientStream = (messages: AsyncIterable<unknown>, caller: CallerContext) => Promise<unknown>;

/** A unary method as a server of this process runs it: the request's and the answer's bytes as on the wire. */
type LocalUnary = (request: Buffer, caller: CallerContext) => Promise<LocalAnswer>;
type LocalAnswer = { ok: true; res: Buffer; replayed?: boolean } | { ok: false; mapped: ServiceError };

/**
 * Unary methods served by the gRPC servers of this process, by `<address> <method
 * path>` (the standalone mode, as inProcessStreams). A client with `inProcess`
 * calls the server's own call path (`GrpcServer.run`: the caller's scope, receipts,
 * timing, the status table) with the request's protobuf bytes and decodes the
 * answer's: what the handler and the caller see is what they see over gRPC, minus
 * the caller's signature, HTTP/2 and the loopback socket (about a fifth of the
 * embedded process's main thread under keyed writes; decision 066).
 */
const inProcessUnaries = new Map<string, LocalUnary>();

/**
 * Client-streaming methods served by the gRPC servers of this process, by
 * `<address> <method path>`. When the gateway and a service share a process (the
 * standalone mode), a client with `inProcess` hands the request messages to the
 * handler directly: a 50 MiB upload then passes no protobuf encoder, HTTP/2 framing
 * or loopback socket, each of which copied every byte once more (the copies are
 * garbage that V8 frees late, and the process's memory peaked on them).
 */
const inProcessStreams = new Map<string, LocalClientStream>();

/** The request side of a client-streaming call, over gRPC or in process. */
export interface RequestStream<T> {
  write(message: T, written?: (err?: Error | null) => void): boolean;
  end(): void;
  /** aborts the call: the handler's reading fails and the response rejects */
  cancel(): void;
  on(event: 'error', listener: (err: Error) => void): unknown;
}

export interface GrpcServerOptions {
  /** service label for logs and metrics */
  name: string;
  logger: Logger;
  /** internal secret that signs caller contexts */
  secret: string;
  /** receipts of keyed calls: answers kept for, and given to, retries (receipts.ts) */
  receipts?: Receipts;
  /**
   * After this long a client's connection is told to go (GOAWAY) and its calls
   * finish within the grace: the client connects again, re-resolving its target,
   * so pods added by a scale-out get their share of calls within minutes instead
   * of never. 0 keeps connections for ever (the standalone process).
   */
  maxConnectionAgeMs?: number;
  maxConnectionAgeGraceMs?: number;
}

/** HTTP/2 receive window of gRPC clients and servers (HTTP/2's default is 64 KiB). */
const RECEIVE_WINDOW = 4 * 1024 * 1024;

const CHANNEL_OPTIONS = {
  'grpc.keepalive_time_ms': 30_000,
  'grpc.keepalive_timeout_ms': 10_000,
  'grpc.max_receive_message_length': 64 * 1024 * 1024,
  'grpc.max_send_message_length': 64 * 1024 * 1024,
  // The client's HTTP/2 receive window (connection and stream). At HTTP/2's
  // default of 64 KiB, a handful of concurrent list pages fill the connection
  // window and the server waits for WINDOW_UPDATE round trips. Servers ignore
  // this option: GrpcServer.openReceiveWindows does the same for them.
  'grpc-node.flow_control_window': RECEIVE_WINDOW,
};

/**
 * Calls go to every ready address of the target, in turn. grpc-js's default
 * (pick_first) sends all of a channel's calls down one connection, and gRPC keeps
 * that connection for ever: behind a Kubernetes Service (which balances
 * connections, not calls) every gateway pod then used one pod of each service.
 */
const SERVICE_CONFIG = JSON.stringify({ loadBalancingConfig: [{ round_robin: {} }] });

/** Options of a client channel: the shared ones, balancing, reconnects and keepalive. */
const CLIENT_CHANNEL_OPTIONS = {
  ...CHANNEL_OPTIONS,
  'grpc.service_config': SERVICE_CONFIG,
  // A replica that restarts is ready about 0.4 s after its start: retry its address
  // soon and often (grpc-js's default, 1 s growing x1.6 to 120 s, left a restarted
  // service without calls for seconds, and its one-replica callers answering 503).
  'grpc.initial_reconnect_backoff_ms': 100,
  'grpc.max_reconnect_backoff_ms': 1_000,
  // dns:/// targets are resolved again when a connection closes (a pod gone, a
  // server's connection age reached); the default floor of 30 s between lookups
  // delayed finding the pods of a scale-out
  'grpc.dns_min_time_between_resolutions_ms': 5_000,
  // idle connections keep pinging (every 30 s, under the idle timeouts of common
  // load balancers and NATs) so a replica that vanished is noticed before a call
  'grpc.keepalive_permit_without_calls': 1,
};

/**
 * How long after its channel was last seen ready a call waits for a connection
 * instead of failing at once. A rolling restart leaves a moment with no replica
 * connected: the one just restarted is still waiting out its reconnect backoff
 * (up to 1 s), or, on Kubernetes, the new pod's address is not resolved yet (DNS
 * at most every 5 s), when the next replica stops. Calls in that moment would fail
 * UNAVAILABLE (a 503) although a replica is up; past it (a service really down)
 * they fail at once again. (grpc's own wait-for-ready on every call, tried
 * instead, made it worse: 42 to 51 503s in the rolling restart test, against 0
 * to 3 this way.)
 */
const RECONNECT_GRACE_MS = 5_000;

/**
 * A call the server refused before running it (HTTP/2 REFUSED_STREAM: a stream
 * opened on a connection it was just closing, at its maximum age or on a
 * graceful stop). grpc-js retries such a call once by itself, but fails it when
 * that retry meets no ready connection; nothing ran, so sending it again is safe
 * for any call, idempotent or not. Up to this many sends in all, within the
 * call's deadline (each after the reconnect wait).
 */
const REFUSED_RETRIES = 3;
const isRefusedStream = (err: ServiceError) => err.code === status.UNAVAILABLE && err.details === 'Stream refused by server';
class RefusedStreamError extends Error {
  constructor(readonly domainError: DomainError) {
    super(domainError.message);
  }
}

/** The key of the database's outages in a server's log, and toServiceError's id of such a failure. */
const DATABASE = 'database';
const DATABASE_AWAY_ID = 'db-unavailable';

/** Default maximum age of a server's connection (10% jitter), and of calls left on it. */
const DEFAULT_MAX_CONNECTION_AGE_MS = 120_000;
/** The longest call (a raw upload's 15-minute deadline) finishes on an aged connection. */
const DEFAULT_MAX_CONNECTION_AGE_GRACE_MS = 16 * 60_000;

/**
 * A gRPC server whose every unary handler gets a verified caller context, runs
 * inside the caller's request scope (request id on every log line), is timed, and
 * has its errors mapped through the one status table.
 */
export class GrpcServer {
  readonly server: Server;
  readonly health = new HealthImplementation({ '': 'NOT_SERVING' });
  private readonly names: string[] = [];
  private readonly clientStreams = new Map<string, (req: unknown, c: CallerContext) => Promise<unknown>>();
  private readonly inProcessKeys: string[] = [];
  private readonly windowed = new WeakSet<object>();
  private readonly codecs = new Map<string, AnswerCodec>();
  /** the unary methods of this server's services, by path: what a batch may call */
  private readonly unaries = new Map<string, UnaryMethod>();
  private readonly databaseOutages: OutageLog;

  constructor(private readonly opts: GrpcServerOptions) {
    // a finished call's objects are let go of with its stream (http2-release.ts)
    releaseClosedHttp2Streams();
    this.databaseOutages = new OutageLog(opts.logger, { fields: { service: opts.name } });
    const age = opts.maxConnectionAgeMs ?? DEFAULT_MAX_CONNECTION_AGE_MS;
    this.server = new Server({
      ...CHANNEL_OPTIONS,
      ...(age > 0
        ? { 'grpc.max_connection_age_ms': age, 'grpc.max_connection_age_grace_ms': opts.maxConnectionAgeGraceMs ?? DEFAULT_MAX_CONNECTION_AGE_GRACE_MS }
        : {}),
    });
    this.health.addToServer(this.server);
    this.server.addService(batch.BatchServiceService, { callBatch: this.serveBatches() });
  }

  add<D extends Definition>(definition: D, handlers: Handlers<D>): this {
    const impl: UntypedServiceImplementation = {};
    for (const method of Object.keys(definition)) {
      const handler = (handlers as Record<string, (req: unknown, c: CallerContext) => unknown>)[method];
      if (!handler) throw new Error(`${this.opts.name}: no handler for ${definition[method]!.path}`);
      const path = definition[method]!.path;
      const { requestDeserialize, responseSerialize, responseDeserialize, requestStream, responseStream } = definition[method]!;
      if (responseSerialize && responseDeserialize) {
        this.codecs.set(path, { encode: responseSerialize as (value: unknown) => Buffer, decode: responseDeserialize });
      }
      if (!requestStream && !responseStream && requestDeserialize && responseSerialize) {
        this.unaries.set(path, {
          handler: handler as (req: unknown, c: CallerContext) => Promise<unknown>,
          decode: requestDeserialize,
          encode: responseSerialize as (value: unknown) => Buffer,
        });
      }
      if (definition[method]!.requestStream && !definition[method]!.responseStream) {
        this.clientStreams.set(path, handler as (req: unknown, c: CallerContext) => Promise<unknown>);
      }
      impl[method] = definition[method]!.responseStream
        ? this.wrapStream(path, handler as (req: unknown, c: CallerContext) => AsyncIterable<unknown>)
        : this.wrap(path, handler as (req: unknown, c: CallerContext) => Promise<unknown>, definition[method]!.requestStream);
    }
    this.server.addService(definition as unknown as ServiceDefinition, impl);
    const first = Object.values(definition)[0];
    if (first) this.names.push(first.path.split('/')[1]!);
    return this;
  }

  /**
   * Unary and client-streaming calls alike: a client-streaming handler gets the
   * call's messages as an async iterable instead of one request.
   */
  private wrap(path: string, handler: (req: unknown, c: CallerContext) => Promise<unknown>, clientStreaming = false) {
    return (call: ServerUnaryCall<unknown, unknown> | ServerReadableStream<unknown, unknown>, callback: sendUnaryData<unknown>) => {
      const started = process.hrtime.bigint();
      const caller = this.verifiedCaller(call.metadata, callback);
      if (!caller) return;
      // the messages' stream watches for a cancel from now on, not from when the handler starts
      const request = clientStreaming ? readable(call as ServerReadableStream<unknown, unknown>) : (call as ServerUnaryCall<unknown, unknown>).request;
      this.run(path, caller, started, (c) => handler(request, c))
        .then((o) => {
          if (!o.ok) callback(o.mapped);
          else {
            if (o.replayed) {
              const md = new Metadata();
              md.set(REPLAYED_KEY, '1');
              call.sendMetadata(md);
            }
            callback(null, o.res);
          }
          // a unary call's object is a Writable, kept until a mark-compact (answered-call.ts)
          if (!clientStreaming) releaseAnsweredCall(call);
        })
        .catch((err: unknown) => this.opts.logger.error({ err, rpc: path }, 'rpc answer not sent'));
    };
  }

  /**
   * lab.common.v1.BatchService/CallBatch (call-batches.ts): each call of the batch
   * runs as a call alone of its method would, at once and side by side (so their
   * reads share a connection, shared-reads.ts): the batch's verified caller with
   * the call's own request id, its own scope, timing, error mapping and log lines.
   * The batch fails as a whole only for what concerns all of it.
   */
  private serveBatches() {
    return (call: ServerUnaryCall<batch.CallBatchRequest, batch.CallBatchResponse>, callback: sendUnaryData<batch.CallBatchResponse>) => {
      const started = process.hrtime.bigint();
      const caller = this.verifiedCaller(call.metadata, callback);
      if (!caller) return;
      const { method, calls } = call.request;
      const target = this.unaries.get(method);
      if (!target) {
        // as gRPC answers a call of a method the server does not have
        callback({ code: status.UNIMPLEMENTED, details: `no unary method ${method} to batch` });
        return;
      }
      const refusal =
        calls.length > MAX_BATCHED_CALLS
          ? `a batch holds at most ${MAX_BATCHED_CALLS} calls, not ${calls.length}`
          : // a keyed call's receipt and replay belong to that call alone
            caller.idempotency_key && 'a batch carries no Idempotency-Key';
      if (refusal) {
        callback(toServiceError(DomainError.invalid(refusal)));
        return;
      }
      Promise.all(
        calls.map((c): Promise<batch.BatchedOutcome> => {
          const own: CallerContext = isSaneRequestId(c.request_id) ? { ...caller, request_id: c.request_id } : caller;
          return this.runEncoded(method, target, own, started, c.request).then((o) =>
            o.ok ? { outcome: { $case: 'response', value: o.res } } : { outcome: { $case: 'error', value: statusParts(o.mapped) } },
          );
        }),
      ).then(
        (outcomes) => {
          callback(null, { outcomes });
          releaseAnsweredCall(call);
        },
        (err: unknown) => this.opts.logger.error({ err, rpc: method }, 'rpc batch answer not sent'),
      );
    };
  }

  /** The call's verified caller; undefined once an unverified one was refused (UNAUTHENTICATED) through `refuse`. */
  private verifiedCaller(metadata: Metadata, refuse: (status: Partial<ServiceError>) => unknown): CallerContext | undefined {
    try {
      return verifyCallerContext(metadata, this.opts.secret);
    } catch (err) {
      refuse(toServiceError(err));
      return undefined;
    }
  }

  /**
   * The database away fails every call alike: logged as it starts and as a call
   * succeeds again (with the count), not once per call. Anything else (a bug with
   * its error id, a rollback for a concurrent write) is about the call: one line each.
   */
  private logFailure(err: unknown, errorId: string, rpc: string): void {
    if (errorId === DATABASE_AWAY_ID) this.databaseOutages.failure(DATABASE, err, { rpc });
    else this.opts.logger.error({ err, error_id: errorId, rpc }, 'rpc failed');
  }

  /**
   * Runs one call's handler, over gRPC or in process: in the caller's request
   * scope (`callScope`), timed, and with its failure mapped through the status
   * table once (an unexpected one logged with its error id).
   */
  private run(path: string, caller: CallerContext, started: bigint, invoke: (c: CallerContext) => unknown): Promise<Outcome> {
    const { logger, name } = this.opts;
    const served = callScope(caller);
    const codec = this.codecs.get(path);
    // a method without a codec (none in the contracts) is served without receipts
    const receipts = codec && this.opts.receipts;
    if (codec && served.scope.idempotency_key) served.scope.encode_answer = codec.encode;
    const failed = (err: unknown): Outcome => {
      const mapped = toServiceError(err, (e, errorId) => this.logFailure(e, errorId, path)) as ServiceError;
      observe(name, path, String(mapped.code), started);
      return { ok: false, err, mapped };
    };
    return requestScope.run(served.scope, () =>
      // Promise.resolve().then: a handler that throws before its first await is
      // mapped like any other failure instead of escaping as an INTERNAL error.
      Promise.resolve()
        .then(() => invoke(served.caller))
        .then(
          (res): Outcome => {
            receipts?.keepAnswer(res);
            this.databaseOutages.success(DATABASE);
            observe(name, path, 'OK', started);
            return { ok: true, res };
          },
          async (err: unknown): Promise<Outcome> => {
            const recovered = await receipts?.recover().catch((e: unknown) => {
              metrics().idempotencyStoreErrors.inc({ operation: 'receipt_lookup' });
              logger.warn({ err: e, rpc: path }, 'receipt lookup failed');
              return undefined;
            });
            if (!recovered) return failed(err);
            if ('error' in recovered) return failed(recovered.error);
            observe(name, path, 'OK', started);
            return { ok: true, res: codec!.decode(recovered.answer), replayed: true };
          },
        )
        // an answer the codec cannot encode (or a stored one it cannot decode) is
        // this call's failure, not an unhandled rejection that ends the process
        .catch(failed),
    );
  }

  /**
   * One unary call from its request's bytes (a call of a batch, or in process):
   * run as a call alone is (`run`), its answer encoded; an answer its codec cannot
   * write fails its own call.
   */
  private async runEncoded(path: string, target: UnaryMethod, caller: CallerContext, started: bigint, request: Buffer): Promise<LocalAnswer> {
    const o = await this.run(path, caller, started, (c) => target.handler(target.decode(request), c));
    if (!o.ok) return o;
    try {
      return { ok: true, res: target.encode(o.res), replayed: o.replayed };
    } catch (err) {
      return { ok: false, mapped: toServiceError(err, (e, id) => this.logFailure(e, id, path)) as ServiceError };
    }
  }

  /**
   * A server-streaming method: the same caller check, scope and error mapping as
   * a unary one; messages are written as the iterable yields them, respecting
   * back-pressure, and a client that goes away stops the iteration.
   */
  private wrapStream(path: string, handler: (req: unknown, c: CallerContext) => AsyncIterable<unknown>) {
    const { name } = this.opts;
    return (call: ServerWritableStream<unknown, unknown>) => {
      const started = process.hrtime.bigint();
      // 'error' (not destroy) is how grpc-js sends a status on a server stream
      const caller = this.verifiedCaller(call.metadata, (status) => call.emit('error', status));
      if (!caller) return;
      const served = callScope(caller);
      requestScope.run(served.scope, () => {
        void (async () => {
          try {
            for await (const msg of handler(call.request, served.caller)) {
              if (call.cancelled || call.destroyed) break;
              // the write may have found the call gone (the narrowing above does not see that)
              // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition
              if (!call.write(msg) && !call.cancelled) await drainedOrGone(call, 'cancelled');
            }
            observe(name, path, 'OK', started);
            call.end();
          } catch (err) {
            const mapped = toServiceError(err, (e, errorId) => this.logFailure(e, errorId, path));
            observe(name, path, String(mapped.code), started);
            call.emit('error', mapped);
          }
        })();
      });
    };
  }

  /**
   * Offers this server's client-streaming methods to in-process clients of
   * `address` (the address its clients are given). The handler runs in the
   * caller's request scope, is timed, and fails with the same DomainError a
   * client would get over gRPC; the caller context is handed over as it is
   * (no signature: it never leaves the process).
   */
  serveInProcess(address: string): void {
    for (const [path, method] of this.unaries) {
      const key = `${address} ${path}`;
      inProcessUnaries.set(key, (request, caller) => this.runEncoded(path, method, caller, process.hrtime.bigint(), request));
      this.inProcessKeys.push(key);
    }
    for (const [path, handler] of this.clientStreams) {
      const key = `${address} ${path}`;
      inProcessStreams.set(key, async (messages, caller) => {
        const o = await this.run(path, caller, process.hrtime.bigint(), (c) => handler(messages, c));
        if (o.ok) return o.res;
        throw o.err instanceof DomainError ? o.err : fromServiceError(o.mapped);
      });
      this.inProcessKeys.push(key);
    }
  }

  /** Binds and starts; returns the bound port (0 asks the OS for a free one). */
  async listen(address: string): Promise<number> {
    const port = await new Promise<number>((resolve, reject) =>
      this.server.bindAsync(address, ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p))),
    );
    this.openReceiveWindows();
    this.health.setStatus('', 'SERVING');
    for (const n of this.names) this.health.setStatus(n, 'SERVING');
    return port;
  }

  /**
   * The server's HTTP/2 receive window, as the clients' (RECEIVE_WINDOW): grpc-js
   * offers no server option for it, so each new session is given it. At HTTP/2's
   * 64 KiB, a few concurrent requests of tens of KiB (a batch of 500 items, an upload
   * piece) filled the connection window and waited for WINDOW_UPDATE round trips.
   * grpc-js keeps those servers private: read through its adapter (decision 055).
   */
  private openReceiveWindows(): void {
    for (const srv of http2ServersOf(this.server)) {
      if (this.windowed.has(srv)) continue;
      this.windowed.add(srv);
      srv.on('session', (session) => {
        try {
          session.settings({ initialWindowSize: RECEIVE_WINDOW });
          session.setLocalWindowSize(RECEIVE_WINDOW);
        } catch {
          /* a session closing at once: nothing to tune */
        }
      });
    }
  }

  setServing(serving: boolean): void {
    const s = serving ? 'SERVING' : 'NOT_SERVING';
    this.health.setStatus('', s);
    for (const n of this.names) this.health.setStatus(n, s);
  }

  /** Lets in-flight calls finish (up to graceMs), then forces the rest. */
  async shutdown(graceMs = 10_000): Promise<void> {
    this.setServing(false);
    for (const key of this.inProcessKeys.splice(0)) {
      inProcessStreams.delete(key);
      inProcessUnaries.delete(key);
    }
    await new Promise<void>((resolve) => {
      const timer = setTimeout(() => {
        this.server.forceShutdown();
        resolve();
      }, graceMs);
      this.server.tryShutdown(() => {
        clearTimeout(timer);
        resolve();
      });
    });
  }
}

/**
 * The messages of a client stream. A client that cancels must make the reader
 * fail (so the handler cleans up) rather than wait forever for the end.
 */
function readable(call: ServerReadableStream<unknown, unknown>): AsyncIterable<unknown> {
  const cancelled = () => new DomainError('unavailable', 'cancelled', 'the client cancelled the call');
  const cancel = () => call.destroy(cancelled());
  // a cancel that came first has already emitted 'cancelled'
  if (call.cancelled) cancel();
  else call.on('cancelled', cancel);
  return (async function* () {
    for await (const message of call) yield message;
    // A client's RST_STREAM ends the stream as its last message would, and grpc-js
    // says the call was cancelled only when the stream's close reaches it, in a later
    // turn of the event loop: wait for that turn, so that a handler does not take a
    // cancelled upload for a complete one (and store it).
    await new Promise((resolve) => setImmediate(resolve));
    if (call.cancelled) throw cancelled();
  })();
}

function observe(service: string, path: string, code: string, started: bigint) {
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  metrics().grpcServerDuration.observe({ service, method: path, code }, seconds);
}

type ClientCtor = new (address: string, credentials: ChannelCredentials, options?: object) => Client;

export interface RpcClientOptions {
  secret: string;
  /** default deadline of one call */
  deadlineMs?: number;
  /**
   * Unary and client-streaming calls to a server of this same process go to it
   * directly (see `GrpcServer.serveInProcess`); others still go over gRPC.
   */
  inProcess?: boolean;
  /** the peer's name in logs and errors (default: the contract's service name) */
  peer?: string;
  /**
   * Where the peer's outages are logged: its calls failing UNAVAILABLE or out of
   * time are one line when they start and one when a call succeeds again.
   */
  outages?: OutageLog;
  /**
   * Methods (reads) whose calls of one caller begun in the same turn go to the
   * peer as one batch (call-batches.ts); calls with an Idempotency-Key never do.
   * Off while tracing is on: a call alone is its own span in its request's trace.
   */
  batched?: readonly string[];
}

/**
 * A typed client for one service definition: `call(method, request, caller)`
 * signs the caller context into metadata, applies a deadline, and turns gRPC
 * errors back into DomainErrors. One channel per client, reused for every call,
 * spread over every address of its target (grpc-target.ts names the forms).
 */
export class RpcClient<D extends Definition> {
  private readonly client: Client;
  private readonly deadlineMs: number;
  /** when the channel was last seen ready (Date.now()) */
  private readyAt = 0;

  /** each method's path and codec, for calls alone and in batches */
  private readonly methods: Map<string, MethodCodec>;
  private readonly batchedMethods: ReadonlySet<string>;
  private readonly batches: CallBatches;

  constructor(
    ctor: ClientCtor,
    readonly address: string,
    private readonly opts: RpcClientOptions,
  ) {
    // a finished call's objects are let go of with its stream (http2-release.ts)
    releaseClosedHttp2Streams();
    this.client = new ctor(address, ChannelCredentials.createInsecure(), CLIENT_CHANNEL_OPTIONS);
    const service =
      (ctor as unknown as { service?: Record<string, { path: string; requestSerialize: (v: never) => Buffer; responseDeserialize: (b: Buffer) => unknown }> })
        .service ?? {};
    this.methods = new Map(
      Object.entries(service).map(([method, d]) => [
        method,
        { path: d.path, serialize: d.requestSerialize as (v: unknown) => Buffer, deserialize: d.responseDeserialize },
      ]),
    );
    this.batchedMethods = new Set(opts.batched ?? []);
    this.deadlineMs = opts.deadlineMs ?? 10_000;
    // '/lab.example.v1.ExampleService/Get' -> 'lab.example.v1.ExampleService'
    const firstPath = [...this.methods.values()][0]?.path ?? '';
    this.peer = opts.peer ?? (firstPath.split('/')[1] || address);
    this.batches = new CallBatches({
      peer: this.peer,
      send: (method, request, caller, deadlineMs) => this.send(method, request, caller, deadlineMs),
      alone: (method, request, caller, deadlineMs) => this.counted(this.send(method, request, caller, deadlineMs)),
      settled: (err) => this.settled(err),
    });
  }

  /** the peer's name in logs, errors and metrics */
  readonly peer: string;

  /** Counts and logs the outcome of one call for the peer's availability. */
  private settled(err: unknown): void {
    if (err === undefined || !(err instanceof DomainError) || !isTransientFailure(err)) {
      this.opts.outages?.success(this.peer);
      return;
    }
    const code = err.upstream?.grpc_code ?? err.code;
    metrics().upstreamFailures.inc({ peer: this.peer, code });
    this.opts.outages?.failure(this.peer, err.upstream ? `${err.upstream.grpc_code}: ${err.upstream.grpc_details}` : err, { peer: this.peer, grpc_code: code });
  }

  call<K extends keyof D & string>(method: K, request: ReqOf<D[K]>, caller: CallerContext, deadlineMs = this.deadlineMs): Promise<ResOf<D[K]>> {
    const codec = this.methods.get(method);
    if (!codec) return Promise.reject(new DomainError('internal', 'internal_error', `no rpc ${method}`));
    // while tracing, a call stays a gRPC call: its spans and the trace's context travel with it
    const local = this.opts.inProcess && !tracingOn() ? inProcessUnaries.get(`${this.address} ${codec.path}`) : undefined;
    if (local) return this.counted(this.callLocal(local, codec, request, caller, deadlineMs)) as Promise<ResOf<D[K]>>;
    if (this.batchedMethods.has(method) && !caller.idempotency_key && !tracingOn()) {
      return this.batches.add(codec, request, caller, deadlineMs) as Promise<ResOf<D[K]>>;
    }
    return this.counted(this.send(codec, request, caller, deadlineMs)) as Promise<ResOf<D[K]>>;
  }

  /** Counts a call's outcome for the peer's availability, and passes it on. */
  private counted(sent: Promise<unknown>): Promise<unknown> {
    return sent.then(
      (res) => {
        this.settled(undefined);
        return res;
      },
      (err: unknown) => {
        this.settled(err);
        throw err;
      },
    );
  }

  /**
   * Sends one call (alone, or a batch of them): after the wait for a connection
   * when there is one, and again while the server refuses its stream unrun.
   */
  private send(codec: MethodCodec, request: unknown, caller: CallerContext, deadlineMs: number): Promise<unknown> {
    // the deadline counts from here: a wait for a connection is part of the call's time
    const deadline = Date.now() + deadlineMs;
    const attempt = (n: number): Promise<unknown> => {
      const reconnecting = this.reconnecting(deadline);
      const sent = reconnecting ? reconnecting.then(() => this.unary(codec, request, caller, deadline)) : this.unary(codec, request, caller, deadline);
      return sent.catch((err: unknown) => {
        if (!(err instanceof RefusedStreamError) || n >= REFUSED_RETRIES || Date.now() >= deadline) {
          throw err instanceof RefusedStreamError ? err.domainError : err;
        }
        return attempt(n + 1);
      });
    };
    return attempt(1);
  }

  /**
   * While the channel was ready a moment ago (RECONNECT_GRACE_MS) but is not now,
   * a promise that settles once it is ready again or the moment is over; undefined
   * otherwise (the usual case: no wait at all). The call is sent only after it:
   * one that still finds no replica then fails at once, as before, unsent.
   */
  private reconnecting(deadline: number): Promise<void> | undefined {
    if (this.client.getChannel().getConnectivityState(true) === connectivityState.READY) {
      this.readyAt = Date.now();
      return undefined;
    }
    const until = Math.min(this.readyAt + RECONNECT_GRACE_MS, deadline);
    if (Date.now() >= until) return undefined;
    return new Promise((resolve) => this.client.waitForReady(until, () => resolve()));
  }

  private unary(codec: MethodCodec, request: unknown, caller: CallerContext, deadline: number): Promise<unknown> {
    const md = new Metadata();
    signCallerContext(md, caller, this.opts.secret);
    return new Promise((resolve, reject) => {
      const sent = this.client.makeUnaryRequest(
        codec.path,
        codec.serialize,
        codec.deserialize,
        request,
        md,
        { deadline },
        (err: ServiceError | null, res: unknown) =>
          err ? reject(isRefusedStream(err) ? new RefusedStreamError(fromServiceError(err, this.peer)) : fromServiceError(err, this.peer)) : resolve(res),
      );
      // only keyed calls can be answered from a receipt; the response headers come before the answer
      if (caller.idempotency_key) {
        const scope = requestScope.getStore();
        sent.on('metadata', (m: Metadata) => {
          if (scope && m.get(REPLAYED_KEY).length) scope.replayed = true;
        });
      }
    });
  }

  /**
   * A unary call to a server of this process: its failure is the DomainError the
   * status would give over gRPC, a replay marks the caller's scope as the response
   * metadata would, and the deadline fails the call as gRPC's does (the handler,
   * as on a server, runs on).
   */
  private callLocal(local: LocalUnary, codec: MethodCodec, request: unknown, caller: CallerContext, deadlineMs: number): Promise<unknown> {
    const scope = caller.idempotency_key ? requestScope.getStore() : undefined;
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<never>((_resolve, reject) => {
      timer = setTimeout(
        () => reject(fromServiceError({ code: status.DEADLINE_EXCEEDED, details: 'Deadline exceeded', metadata: new Metadata() } as ServiceError, this.peer)),
        deadlineMs,
      );
    });
    const answered = Promise.resolve()
      .then(() => local(codec.serialize(request), { ...caller }))
      .then((o) => {
        if (!o.ok) throw fromServiceError(o.mapped, this.peer);
        if (o.replayed && scope) scope.replayed = true;
        return codec.deserialize(o.res);
      });
    return Promise.race([answered, late]).finally(() => clearTimeout(timer));
  }

  /**
   * A server-streaming call as an async iterable of its messages; an error
   * status ends the iteration with the DomainError it carries.
   */
  async *stream<K extends keyof D & string>(method: K, request: ReqOf<D[K]>, caller: CallerContext, deadlineMs = this.deadlineMs): AsyncGenerator<ResOf<D[K]>> {
    const md = new Metadata();
    signCallerContext(md, caller, this.opts.secret);
    const fn = (this.client as unknown as Record<string, (...args: unknown[]) => unknown>)[method];
    if (!fn) throw new DomainError('internal', 'internal_error', `no rpc ${method}`);
    const call = fn.call(this.client, request, md, { deadline: Date.now() + deadlineMs }) as AsyncIterable<ResOf<D[K]>> & {
      cancel(): void;
    };
    try {
      for await (const msg of call) yield msg;
    } catch (err) {
      throw (err as Partial<ServiceError>).code !== undefined ? fromServiceError(err as ServiceError, this.peer) : err;
    } finally {
      call.cancel();
    }
  }

  /**
   * A client-streaming call: write the request messages to `stream` (honouring
   * its backpressure), end it, and await `response`; `stream.cancel()` aborts.
   */
  clientStream<K extends keyof D & string>(
    method: K,
    caller: CallerContext,
    deadlineMs = this.deadlineMs,
  ): { stream: RequestStream<ReqOf<D[K]>>; response: Promise<ResOf<D[K]>> } {
    const local = this.opts.inProcess ? inProcessStreams.get(`${this.address} ${this.methods.get(method)?.path}`) : undefined;
    if (local) return localClientStream(local, caller, deadlineMs) as { stream: RequestStream<ReqOf<D[K]>>; response: Promise<ResOf<D[K]>> };
    const md = new Metadata();
    signCallerContext(md, caller, this.opts.secret);
    const fn = (this.client as unknown as Record<string, (...args: unknown[]) => unknown>)[method];
    if (!fn) throw new DomainError('internal', 'internal_error', `no rpc ${method}`);
    let stream!: ClientWritableStream<ReqOf<D[K]>>;
    const response = new Promise<ResOf<D[K]>>((resolve, reject) => {
      stream = fn.call(this.client, md, { deadline: Date.now() + deadlineMs }, (err: ServiceError | null, res: ResOf<D[K]>) =>
        err ? reject(fromServiceError(err, this.peer)) : resolve(res),
      ) as ClientWritableStream<ReqOf<D[K]>>;
    });
    return { stream, response };
  }

  close(): void {
    this.client.close();
  }
}

/**
 * A client-streaming call to a handler of this process: the messages pass through
 * an object stream that holds at most 16 of them (the writer's callbacks wait
 * while it is full, as they wait for the transport over gRPC). The deadline and
 * cancel() end the handler's reading with an error, like a cancelled gRPC call.
 */
function localClientStream(
  handler: LocalClientStream,
  caller: CallerContext,
  deadlineMs: number,
): { stream: RequestStream<unknown>; response: Promise<unknown> } {
  const messages = new PassThrough({ objectMode: true, highWaterMark: 16 });
  const abort = (err: DomainError) => {
    if (!messages.destroyed) messages.destroy(err);
  };
  const timer = setTimeout(() => abort(new DomainError('unavailable', 'deadline_exceeded', 'the call ran out of time')), deadlineMs);
  timer.unref();
  const response = handler(messages, caller).finally(() => {
    clearTimeout(timer);
    // a handler that answered early (refused the upload) reads no more: drop what waits
    if (!messages.destroyed) messages.destroy();
  });
  const stream: RequestStream<unknown> = {
    write: (message, written) => {
      if (messages.destroyed) {
        written?.(null);
        return false;
      }
      return messages.write(message, written);
    },
    end: () => {
      if (!messages.destroyed) messages.end();
    },
    cancel: () => abort(new DomainError('unavailable', 'cancelled', 'the client cancelled the call')),
    on: (event, listener) => messages.on(event, listener),
  };
  return { stream, response };
}
