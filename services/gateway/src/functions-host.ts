import type { ClientDocuments, FunctionsHost, StateSigner } from '@lab/functions';
import { DEFAULT_LIMITS } from '@lab/rate-limits';
import { callerOf } from './auth.js';
import { clientAddress } from './client-address.js';
import type { Deps } from './request.js';

/**
 * The gateway as the host of the functions base (@lab/functions): its ports
 * implemented with the gateway's own authentication, rate limits and clients,
 * so a function is authenticated and counted as any other route is.
 */
export function functionsHost(
  deps: Pick<Deps, 'log' | 'clients' | 'auth' | 'limiter'>,
  oauthState: StateSigner,
  clientDocuments: ClientDocuments,
): FunctionsHost {
  const { log, clients, auth, limiter } = deps;
  return {
    log,
    clients,
    oauthState,
    clientDocuments,
    clientAddress,
    limiter,
    authenticateUser: async (request, audience) => {
      const principal = await auth.user(request.req, request.requestId, audience);
      const caller = callerOf(principal, request.requestId);
      request.principal = principal;
      request.caller = caller;
      request.rate = await limiter.consume(principal.token_id, principal.rate_limit ?? DEFAULT_LIMITS);
      return { principal, caller };
    },
    dropTokens: (tokenIds) => auth.cache.dropTokens(tokenIds),
  };
}
