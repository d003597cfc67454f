import { outbox as contract, timestampFromText } from '@lab/contracts';
import { DomainError } from './errors.js';
import type { GrpcServer } from './grpc.js';
import { assertOperator } from './operator-only.js';
import { isUuid } from './ids.js';
import type { DeadLetter, Outbox } from './outbox.js';

/** The largest page of dead letters one call answers (the management API's list maximum). */
export const MAX_DEAD_LETTERS_PAGE = 200;

function deadLetterMessage(d: DeadLetter): contract.DeadLetter {
  return {
    ...d,
    queue: d.queue ?? undefined,
    created_at: timestampFromText(d.created_at),
    parked_at: timestampFromText(d.parked_at),
    message: d.message,
  };
}

/**
 * Serves the service's dead letters (lab.outbox.v1.DeadLetterService) on its gRPC
 * server: every service has an outbox, so every service answers it, and the
 * gateway's management routes ask each one (docs/decisions.md).
 */
export function serveDeadLetters(server: GrpcServer, outbox: Outbox): void {
  server.add(contract.DeadLetterServiceService, {
    listDeadLetters: async (req, caller) => {
      // dead letters are an operator's business: the management API's token, nothing else
      assertOperator(caller, 'reading and replaying dead letters');
      // a caller in the same process may hand over a partial request, not a decoded one
      /* eslint-disable @typescript-eslint/no-unnecessary-condition -- see above */
      const limit = req.limit ?? 0;
      const offset = req.offset ?? 0;
      /* eslint-enable @typescript-eslint/no-unnecessary-condition */
      if (limit < 1 || limit > MAX_DEAD_LETTERS_PAGE || offset < 0) {
        throw DomainError.invalid(`limit must be 1 to ${MAX_DEAD_LETTERS_PAGE} and offset at least 0`);
      }
      const page = await outbox.deadLetters(limit, offset);
      return { dead_letters: page.data.map(deadLetterMessage), total: page.total };
    },
    replayDeadLetter: async (req, caller) => {
      assertOperator(caller, 'reading and replaying dead letters');
      if (!isUuid(req.id)) throw DomainError.invalid('id must be a UUID', { fields: [{ path: 'id', message: 'must be a UUID' }] });
      return { replayed: await outbox.replayDeadLetter(req.id.toLowerCase()) };
    },
  });
}
