import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { gunzipSync } from 'node:zlib';

/** One span as a test reads it: ids in hex, as the OTLP JSON encoding gives them. */
export interface ReceivedSpan {
  traceId: string;
  spanId: string;
  /** empty for a root span */
  parentSpanId: string;
  name: string;
  /** OTLP SpanKind: 1 internal, 2 server, 3 client, 4 producer, 5 consumer */
  kind: number;
  /** the resource's service.name */
  service: string;
  attributes: Record<string, unknown>;
  /** OTLP status code: 0 unset, 1 ok, 2 error */
  status: number;
}

export const SPAN_KIND = { internal: 1, server: 2, client: 3, producer: 4, consumer: 5 } as const;

export interface OtlpReceiver {
  /** what OTEL_EXPORTER_OTLP_ENDPOINT is set to: the exporter adds /v1/traces */
  endpoint: string;
  /** every span received so far */
  spans(): ReceivedSpan[];
  /** export requests received so far (any path, decodable or not) */
  requests(): number;
  close(): Promise<void>;
}

interface OtlpValue {
  stringValue?: string;
  intValue?: string | number;
  doubleValue?: number;
  boolValue?: boolean;
  arrayValue?: { values?: OtlpValue[] };
}

interface OtlpRequest {
  resourceSpans?: {
    resource?: { attributes?: { key: string; value: OtlpValue }[] };
    scopeSpans?: {
      spans?: {
        traceId: string;
        spanId: string;
        parentSpanId?: string;
        name: string;
        kind: number;
        attributes?: { key: string; value: OtlpValue }[];
        status?: { code?: number };
      }[];
    }[];
  }[];
}

const valueOf = (v: OtlpValue): unknown =>
  v.stringValue ?? (v.intValue !== undefined ? Number(v.intValue) : undefined) ?? v.doubleValue ?? v.boolValue ?? v.arrayValue?.values?.map(valueOf);

const attributesOf = (list: { key: string; value: OtlpValue }[] = []) => Object.fromEntries(list.map((a) => [a.key, valueOf(a.value)]));

/**
 * An OTLP/HTTP trace receiver on a loopback port, as a collector would be: it
 * takes the exporters' real export requests (POST /v1/traces, the OTLP JSON
 * encoding that @opentelemetry/exporter-trace-otlp-http sends, gzip or not),
 * answers them as a collector does, and keeps the spans for the test to read.
 * A payload in another encoding fails loudly: the test would otherwise wait
 * for spans that never decode.
 */
export async function startOtlpReceiver(at: { host?: string; port?: number } = {}): Promise<OtlpReceiver> {
  const received: ReceivedSpan[] = [];
  let requests = 0;
  const errors: string[] = [];
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      requests++;
      try {
        if (req.method !== 'POST' || req.url !== '/v1/traces') throw new Error(`unexpected ${req.method} ${req.url}`);
        if (!String(req.headers['content-type']).startsWith('application/json')) throw new Error(`not OTLP JSON: ${req.headers['content-type']}`);
        let body = Buffer.concat(chunks);
        if (req.headers['content-encoding'] === 'gzip') body = gunzipSync(body);
        const payload = JSON.parse(body.toString('utf8')) as OtlpRequest;
        for (const rs of payload.resourceSpans ?? []) {
          const service = String((attributesOf(rs.resource?.attributes)['service.name'] as string | number | boolean | undefined) ?? '');
          for (const ss of rs.scopeSpans ?? []) {
            for (const s of ss.spans ?? []) {
              received.push({
                traceId: s.traceId,
                spanId: s.spanId,
                parentSpanId: s.parentSpanId ?? '',
                name: s.name,
                kind: s.kind,
                service,
                attributes: attributesOf(s.attributes),
                status: s.status?.code ?? 0,
              });
            }
          }
        }
        res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
      } catch (err) {
        errors.push((err as Error).message);
        res.writeHead(400, { 'content-type': 'application/json' }).end(JSON.stringify({ message: (err as Error).message }));
      }
    });
  });
  const host = at.host ?? '127.0.0.1';
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(at.port ?? 0, host, resolve);
  });
  const port = (server.address() as AddressInfo).port;
  return {
    endpoint: `http://${host}:${port}`,
    spans: () => {
      if (errors.length) throw new Error(`OTLP receiver refused export requests: ${errors.join('; ')}`);
      return [...received];
    },
    requests: () => requests,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
