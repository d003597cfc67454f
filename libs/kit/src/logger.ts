import pino from 'pino';
import { requestScope } from './context.js';
import { logErr } from './error-text.js';
import { traceFields } from './tracing.js';

export { errText, logErr } from './error-text.js';

export type Logger = pino.Logger;

/**
 * One pino logger per process. The mixin stamps the request id of the current
 * async flow (HTTP request, gRPC call or bus message) on every line, and, when
 * tracing is on, the trace and span ids of the active span (tracing.ts), so a
 * line leads to its trace.
 */
export function createLogger(service: string, level = process.env.LOG_LEVEL ?? 'info'): Logger {
  return pino({
    name: service,
    level,
    base: { service },
    timestamp: pino.stdTimeFunctions.isoTime,
    mixin() {
      const scope = requestScope.getStore();
      const ids = traceFields();
      if (ids) return scope ? { request_id: scope.request_id, ...ids } : ids;
      return scope ? { request_id: scope.request_id } : {};
    },
    redact: {
      paths: ['req.headers.authorization', 'authorization', 'password', 'token', 'secret', '*.password', '*.token', '*.secret'],
      censor: '[redacted]',
    },
    serializers: { err: logErr },
  });
}
