import pino from 'pino';
import { requestScope } from './context.js';

export type Logger = pino.Logger;

/**
 * One pino logger per process. The mixin stamps the request id of the current
 * async flow (HTTP request, gRPC call or bus message) on every line.
 */
export function createLogger(service: string, level = process.env.LOG_LEVEL ?? 'info'): Logger {
  return pino({
    name: service,
    level,
    base: { service },
    timestamp: pino.stdTimeFunctions.isoTime,
    mixin() {
      const scope = requestScope.getStore();
      return scope ? { request_id: scope.request_id } : {};
    },
    redact: {
      paths: ['req.headers.authorization', 'authorization', 'password', 'token', 'secret', '*.password', '*.token', '*.secret'],
      censor: '[redacted]',
    },
  });
}
