import { context, propagation, ROOT_CONTEXT, SpanKind, SpanStatusCode, trace, type Attributes, type Context, type Span } from '@opentelemetry/api';
import type { Sampler } from '@opentelemetry/sdk-trace';
import { errText } from './error-text.js';

/**
 * Distributed tracing (OpenTelemetry), on only when an OTLP endpoint is set
 * (OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT). Off, the
 * SDK and its instrumentations are never loaded, nothing hooks a module, and
 * every helper here is one check of `tracingOn()` before doing nothing: the
 * request path pays no propagation work at all.
 *
 * Across the asynchronous hops the W3C trace context travels with the message:
 * the outbox row keeps the `traceparent` / `tracestate` of the context that
 * wrote it, the relay sends them as message headers (RabbitMQ) or hands them to
 * the in-process bus, and the consumer's span continues that trace.
 */

/** A W3C trace context as stored and sent with a message (https://www.w3.org/TR/trace-context/). */
export interface TraceCarrier {
  traceparent?: string;
  tracestate?: string;
}

let provider: { forceFlush(): Promise<void>; shutdown(): Promise<void> } | undefined;

/** Whether this process traces: the one check every propagation helper makes first. */
export function tracingOn(): boolean {
  return provider !== undefined;
}

/** Where spans go; undefined when tracing stays off. */
export function tracesEndpoint(env: NodeJS.ProcessEnv = process.env): string | undefined {
  if ((env.OTEL_SDK_DISABLED ?? '').trim().toLowerCase() === 'true') return undefined;
  if ((env.OTEL_TRACES_EXPORTER ?? '').trim().toLowerCase() === 'none') return undefined;
  return env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT?.trim() || env.OTEL_EXPORTER_OTLP_ENDPOINT?.trim() || undefined;
}

/**
 * Requests that are not traced: probes (the gateway's liveness probe is
 * /v1/health) and scrapes would each be a trace of their own, every few seconds.
 */
const UNTRACED_PATHS = new Set(['/metrics', '/livez', '/readyz', '/healthz', '/v1/health']);

/**
 * Sets tracing up for this process when an OTLP endpoint is configured, and
 * says whether it did. Must run before the modules it instruments are first
 * required (http, @grpc/grpc-js, pg, amqplib): each service's main imports its
 * `tracing.ts` first for that. `service` is the default of OTEL_SERVICE_NAME;
 * OTEL_RESOURCE_ATTRIBUTES, OTEL_TRACES_SAMPLER(_ARG), OTEL_BSP_SCHEDULE_DELAY and
 * the exporter's own OTEL_EXPORTER_OTLP_* variables apply as the specification
 * says. Spans go out over OTLP/HTTP (JSON) in batches.
 */
export function startTracing(service: string, env: NodeJS.ProcessEnv = process.env): boolean {
  if (provider) return true;
  if (!tracesEndpoint(env)) return false;
  // Loaded only now: with tracing off none of these modules is even read.
  /* eslint-disable @typescript-eslint/no-require-imports -- a synchronous load on demand (see above) */
  const { AsyncLocalStorageContextManager } = require('@opentelemetry/context-async-hooks') as typeof import('@opentelemetry/context-async-hooks');
  const core = require('@opentelemetry/core') as typeof import('@opentelemetry/core');
  const { CompositePropagator, W3CBaggagePropagator, W3CTraceContextPropagator } = core;
  const { defaultResource, detectResources, envDetector, resourceFromAttributes } =
    require('@opentelemetry/resources') as typeof import('@opentelemetry/resources');
  const { BatchSpanProcessor, TracerProvider } = require('@opentelemetry/sdk-trace') as typeof import('@opentelemetry/sdk-trace');
  const { OTLPTraceExporter } = require('@opentelemetry/exporter-trace-otlp-http') as typeof import('@opentelemetry/exporter-trace-otlp-http');
  const { registerInstrumentations } = require('@opentelemetry/instrumentation') as typeof import('@opentelemetry/instrumentation');
  const { HttpInstrumentation } = require('@opentelemetry/instrumentation-http') as typeof import('@opentelemetry/instrumentation-http');
  const { GrpcInstrumentation } = require('@opentelemetry/instrumentation-grpc') as typeof import('@opentelemetry/instrumentation-grpc');
  const { PgInstrumentation } = require('@opentelemetry/instrumentation-pg') as typeof import('@opentelemetry/instrumentation-pg');
  const { AmqplibInstrumentation } = require('@opentelemetry/instrumentation-amqplib') as typeof import('@opentelemetry/instrumentation-amqplib');
  /* eslint-enable @typescript-eslint/no-require-imports */

  const delay = env.OTEL_BSP_SCHEDULE_DELAY ? Number(env.OTEL_BSP_SCHEDULE_DELAY) : NaN;
  const tracerProvider = new TracerProvider({
    // OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES (envDetector) win over the default name
    resource: defaultResource()
      .merge(resourceFromAttributes({ 'service.name': service }))
      .merge(detectResources({ detectors: [envDetector] })),
    sampler: samplerFromEnv(env),
    spanProcessors: [
      new BatchSpanProcessor({ exporter: new OTLPTraceExporter(), ...(Number.isFinite(delay) && delay >= 0 ? { scheduledDelayMillis: delay } : {}) }),
    ],
  });
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  propagation.setGlobalPropagator(new CompositePropagator({ propagators: [new W3CTraceContextPropagator(), new W3CBaggagePropagator()] }));
  trace.setGlobalTracerProvider(tracerProvider);
  registerInstrumentations({
    tracerProvider,
    instrumentations: [
      new HttpInstrumentation({
        ignoreIncomingRequestHook: (req) => UNTRACED_PATHS.has((req.url ?? '').split('?')[0]!),
        // outbound requests of this process's own background work (none is
        // expected) would be traces of their own: only those inside a trace count
        requireParentforOutgoingSpans: true,
      }),
      // health checks and watches are probes, not requests
      new GrpcInstrumentation({ ignoreGrpcMethods: ['Check', 'Watch'] }),
      // statements of a request or a message only: the relay's and the workers'
      // polls would otherwise be a trace each, every second, in every service
      new PgInstrumentation({ requireParentSpan: true, ignoreConnectSpans: true }),
      // RabbitMQ: a producer span per publish (its context in the message's
      // headers) and a consumer span per delivery, continuing that context, until
      // the message is settled
      new AmqplibInstrumentation(),
    ],
  });
  httpRequestOf = (ctx) => {
    const meta = core.getRPCMetadata(ctx);
    return meta?.type === core.RPCType.HTTP ? meta : undefined;
  };
  provider = tracerProvider;
  return true;
}

/** The HTTP instrumentation's record of the request being served (it names the server span from its route). */
let httpRequestOf: ((ctx: Context) => { route?: string } | undefined) | undefined;

/**
 * Names the HTTP server span of the request being served after its route
 * ("POST /v1/{resource}", attribute http.route), as a web framework's
 * instrumentation does: the gateway routes with its own table, not express's.
 */
export function nameHttpRoute(route: string): void {
  if (!provider) return;
  const request = httpRequestOf?.(context.active());
  if (request) request.route = route;
}

/**
 * Sends the spans still buffered and stops the exporter: the last step of a
 * graceful stop, so the traces of the requests it finished are not lost.
 */
export async function stopTracing(): Promise<void> {
  const p = provider;
  if (!p) return;
  await p.shutdown().catch(() => undefined);
}

/**
 * OTEL_TRACES_SAMPLER / OTEL_TRACES_SAMPLER_ARG as the specification names them
 * (the SDK leaves reading them to its callers). Default: parentbased_always_on,
 * so a service follows the decision of the request that reached it.
 */
export function samplerFromEnv(env: NodeJS.ProcessEnv = process.env): Sampler {
  const { AlwaysOffSampler, AlwaysOnSampler, ParentBasedSampler, TraceIdRatioBasedSampler } =
    // eslint-disable-next-line @typescript-eslint/no-require-imports -- the SDK is read only once tracing is on (startTracing)
    require('@opentelemetry/sdk-trace') as typeof import('@opentelemetry/sdk-trace');
  const arg = Number(env.OTEL_TRACES_SAMPLER_ARG);
  const ratio = () => new TraceIdRatioBasedSampler(Number.isFinite(arg) && arg >= 0 && arg <= 1 ? arg : 1);
  switch ((env.OTEL_TRACES_SAMPLER ?? '').trim().toLowerCase()) {
    case 'always_on':
      return new AlwaysOnSampler();
    case 'always_off':
      return new AlwaysOffSampler();
    case 'traceidratio':
      return ratio();
    case 'parentbased_always_off':
      return new ParentBasedSampler({ root: new AlwaysOffSampler() });
    case 'parentbased_traceidratio':
      return new ParentBasedSampler({ root: ratio() });
    default:
      return new ParentBasedSampler({ root: new AlwaysOnSampler() });
  }
}

/** The trace and span ids of the active span, for the log line written inside it (logger.ts). */
export function traceFields(): { trace_id: string; span_id: string } | undefined {
  if (!provider) return undefined;
  const sc = trace.getSpan(context.active())?.spanContext();
  if (!sc || !trace.isSpanContextValid(sc)) return undefined;
  return { trace_id: sc.traceId, span_id: sc.spanId };
}

/**
 * The trace context of the active span, to keep with what is written now and
 * handled later (an outbox row, a webhook delivery); undefined when tracing is
 * off or nothing is traced.
 */
export function activeTraceCarrier(): TraceCarrier | undefined {
  if (!provider) return undefined;
  return carrierOf(context.active());
}

function carrierOf(ctx: Context): TraceCarrier | undefined {
  const carrier: TraceCarrier = {};
  propagation.inject(ctx, carrier);
  return carrier.traceparent ? carrier : undefined;
}

/** The context a stored or received carrier names (the root context when there is none). */
function parentOf(carrier: TraceCarrier | undefined | null): Context {
  if (!carrier?.traceparent) return ROOT_CONTEXT;
  return propagation.extract(ROOT_CONTEXT, carrier);
}

/**
 * Runs fn (synchronous) with the context a stored carrier names as the active
 * one: what the instrumentations do inside it (a RabbitMQ publish) is then part
 * of that trace.
 */
export function withTraceContext<T>(carrier: TraceCarrier | undefined, fn: () => T): T {
  if (!provider || !carrier?.traceparent) return fn();
  return context.with(parentOf(carrier), fn);
}

const tracer = () => trace.getTracer('@lab/kit');

/**
 * Runs fn in a new span, the child of the context `parent` carries (a message's,
 * a stored delivery's), and ends it with fn: an error marks it failed. Off, fn
 * runs as it is.
 */
export function inSpan<T>(
  name: string,
  kind: SpanKind,
  parent: TraceCarrier | undefined | null,
  attributes: Attributes,
  fn: (span?: Span) => Promise<T>,
): Promise<T> {
  if (!provider) return fn();
  return tracer().startActiveSpan(name, { kind, attributes }, parentOf(parent), async (span) => {
    try {
      return await fn(span);
    } catch (err) {
      failSpan(span, err);
      throw err;
    } finally {
      span.end();
    }
  });
}

/**
 * Starts a span that is not made active (a publish whose confirm comes later)
 * and returns it with the carrier naming it, to send along with the message.
 */
export function startDetachedSpan(
  name: string,
  kind: SpanKind,
  parent: TraceCarrier | undefined | null,
  attributes: Attributes,
): { span: Span; carrier: TraceCarrier | undefined } {
  const span = tracer().startSpan(name, { kind, attributes }, parentOf(parent));
  return { span, carrier: carrierOf(trace.setSpan(ROOT_CONTEXT, span)) };
}

/** Marks a span failed with the error's message, without a failed statement's values (logger.ts errText). */
export function failSpan(span: Span, err: unknown): void {
  const message = errText(err);
  span.setStatus({ code: SpanStatusCode.ERROR, message: message.slice(0, 500) });
  span.setAttribute('error.type', err instanceof Error ? err.name : 'error');
}

export { SpanKind };
