import { activeTraceCarrier, inSpan, samplerFromEnv, SpanKind, traceFields, tracesEndpoint, tracingOn, withTraceContext } from '../src/tracing';

// Only what runs without starting tracing: startTracing registers process-wide
// providers and hooks, so it is exercised in processes of its own
// (testing/test/tracing.e2e.test.ts).

describe('tracing settings', () => {
  it('is on only with an OTLP endpoint, and off with OTEL_SDK_DISABLED or no exporter', () => {
    expect(tracesEndpoint({})).toBeUndefined();
    expect(tracesEndpoint({ OTEL_EXPORTER_OTLP_ENDPOINT: '  ' })).toBeUndefined();
    expect(tracesEndpoint({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318' })).toBe('http://collector:4318');
    expect(tracesEndpoint({ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://collector:4318/v1/traces' })).toBe('http://collector:4318/v1/traces');
    expect(tracesEndpoint({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318', OTEL_SDK_DISABLED: 'TRUE' })).toBeUndefined();
    expect(tracesEndpoint({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318', OTEL_SDK_DISABLED: 'false' })).toBe('http://collector:4318');
    expect(tracesEndpoint({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318', OTEL_TRACES_EXPORTER: 'none' })).toBeUndefined();
  });

  it('reads OTEL_TRACES_SAMPLER and its argument as the specification names them', () => {
    const described = (env: Record<string, string>) => samplerFromEnv(env).toString();
    expect(described({})).toMatch(/^ParentBased\{root=AlwaysOnSampler/);
    expect(described({ OTEL_TRACES_SAMPLER: 'always_off' })).toBe('AlwaysOffSampler');
    expect(described({ OTEL_TRACES_SAMPLER: 'always_on' })).toBe('AlwaysOnSampler');
    expect(described({ OTEL_TRACES_SAMPLER: 'traceidratio', OTEL_TRACES_SAMPLER_ARG: '0.25' })).toBe('TraceIdRatioBased{0.25}');
    expect(described({ OTEL_TRACES_SAMPLER: 'parentbased_traceidratio', OTEL_TRACES_SAMPLER_ARG: '0.1' })).toMatch(
      /^ParentBased\{root=TraceIdRatioBased\{0.1\}/,
    );
    expect(described({ OTEL_TRACES_SAMPLER: 'parentbased_always_off' })).toMatch(/^ParentBased\{root=AlwaysOffSampler/);
    // an argument out of range keeps every trace rather than none
    expect(described({ OTEL_TRACES_SAMPLER: 'traceidratio', OTEL_TRACES_SAMPLER_ARG: '7' })).toBe('TraceIdRatioBased{1}');
  });

  it('off, the helpers of the request path do nothing but run what they wrap', async () => {
    expect(tracingOn()).toBe(false);
    expect(activeTraceCarrier()).toBeUndefined();
    expect(traceFields()).toBeUndefined();
    const carrier = { traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01' };
    expect(withTraceContext(carrier, () => 'ran')).toBe('ran');
    await expect(inSpan('a span', SpanKind.CONSUMER, carrier, {}, async (span) => (span === undefined ? 'no span' : 'span'))).resolves.toBe('no span');
  });
});
