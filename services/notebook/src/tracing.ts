// Imported first by main.ts: the instrumentations hook http, gRPC, pg and amqplib
// only in modules required after them. Off (and nothing loaded) without an OTLP endpoint.
import { startTracing } from '@lab/kit/tracing';

startTracing('notebook');
