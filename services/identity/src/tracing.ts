// Imported first by main.ts: the instrumentations hook http, express, gRPC and pg
// only in modules required after them. Off (and nothing loaded) without an OTLP endpoint.
import { startTracing } from '@lab/kit/tracing';

startTracing('identity');
