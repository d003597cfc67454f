import { utcMicrosText, type outbox } from '@lab/contracts';
import { deadLettersQuery, json, type Reply } from '@lab/http-api';
import { DomainError, isUuid } from '@lab/kit';
import { callerIn, type Ctx, type Deps } from '../request.js';
import { parseWith } from '../validation.js';

/*
 * The management routes of dead letters: messages an outbox set aside (a consumer
 * gave up on them, or the broker kept refusing them). Each service keeps its own
 * in its schema and serves them over lab.outbox.v1.DeadLetterService, so these
 * routes ask every service of the deployment (docs/decisions.md).
 */

/** A dead letter as the management API shows it: its service first, times in UTC to the microsecond. */
function deadLetterObject(service: string, d: outbox.DeadLetter): Record<string, unknown> {
  return {
    service,
    id: d.id,
    type: d.type,
    queue: d.queue ?? null,
    error: d.error,
    attempts: d.attempts,
    created_at: d.created_at ? utcMicrosText(d.created_at) : null,
    parked_at: d.parked_at ? utcMicrosText(d.parked_at) : null,
    message: d.message ?? null,
  };
}

/**
 * One list over every service's dead letters, ordered by service (the
 * deployment's order), then latest set aside first. The services' counts come
 * first, so that each one is asked only for its part of the page.
 */
export async function listDeadLetters(ctx: Ctx, deps: Deps): Promise<Reply> {
  const q = parseWith(deadLettersQuery, ctx.req.query, 'invalid query');
  const caller = callerIn(ctx);
  const services = deps.clients.names();
  const totals = await Promise.all(
    services.map(async (s) => (await deps.clients.deadLetters(s).call('listDeadLetters', { limit: 1, offset: 0 }, caller)).total),
  );
  const parts: Promise<Record<string, unknown>[]>[] = [];
  let start = 0;
  for (const [i, service] of services.entries()) {
    const total = totals[i]!;
    // the part of [offset, offset + limit) that falls in this service's [start, start + total)
    const from = Math.max(q.offset, start);
    const to = Math.min(q.offset + q.limit, start + total);
    if (to > from) {
      parts.push(
        deps.clients
          .deadLetters(service)
          .call('listDeadLetters', { limit: to - from, offset: from - start }, caller)
          .then((r) => r.dead_letters.map((d) => deadLetterObject(service, d))),
      );
    }
    start += total;
  }
  const data = (await Promise.all(parts)).flat();
  return json(200, { data, pagination: { limit: q.limit, offset: q.offset, total: start } });
}

/** Puts a dead letter back into its service's outbox: 202 once it is there, 404 when no service has it. */
export async function replayDeadLetter(ctx: Ctx, deps: Deps): Promise<Reply> {
  const id = ctx.params.id ?? '';
  if (!isUuid(id)) throw DomainError.invalid('id must be a UUID', { fields: [{ path: 'id', message: 'must be a UUID' }] });
  const caller = callerIn(ctx);
  const services = deps.clients.names();
  const answers = await Promise.all(
    services.map(async (s) => (await deps.clients.deadLetters(s).call('replayDeadLetter', { id: id.toLowerCase() }, caller)).replayed),
  );
  const service = services.find((_, i) => answers[i]);
  if (!service) throw DomainError.notFound('no dead letter with this id');
  return json(202, { data: { id: id.toLowerCase(), service, replayed: true } });
}
