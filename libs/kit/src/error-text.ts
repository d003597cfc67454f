import pino from 'pino';

/**
 * pino's error serializer without the values of the statement that failed: the
 * query layer's "Failed query" error carries its bound parameters (in `params` and
 * in its message and stack), and PostgreSQL's `detail` the row's values ("Key
 * (x)=(...)", "Failing row contains ..."): signing secrets and tenant data that
 * must not outlive the request in a log. The statement, the codes and the
 * constraint stay.
 */
export function logErr(err: unknown): unknown {
  // pino gives back what is not an Error (null and undefined too) as it is
  const serialized: unknown = pino.stdSerializers.err(err as Error);
  if (serialized === err || !serialized || typeof serialized !== 'object') return serialized;
  const out = serialized as Record<string, unknown>;
  for (let e = err as { params?: unknown; cause?: unknown } | undefined, depth = 0; e && typeof e === 'object' && depth < 5; e = e.cause as typeof e, depth++) {
    if (e.params === undefined) continue;
    // the statement's parameters (an array) as they stand in the driver's message
    // eslint-disable-next-line @typescript-eslint/no-base-to-string
    const given = `\nparams: ${String(e.params)}`;
    for (const k of ['message', 'stack'] as const) {
      if (typeof out[k] === 'string') out[k] = out[k].split(given).join('\nparams: [redacted]');
    }
  }
  for (const k of ['params', 'detail']) if (out[k] !== undefined) out[k] = '[redacted]';
  return out;
}

/** An error's message for a one-line log, without a failed statement's values (see logErr). */
export function errText(err: unknown): string {
  const out = logErr(err) as { message?: unknown } | null;
  return out && typeof out === 'object' && typeof out.message === 'string' ? out.message : String(err);
}
