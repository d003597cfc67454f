import { signedExperimentJson } from '@lab/contracts';
import { grantBody, signBody, itemFromJson, json, type Reply } from '@lab/http-api';
import { DomainError, systemContext } from '@lab/kit';
import { recordId } from './records.js';
import { callerIn, principalIn, type Ctx, type Deps } from '../request.js';
import { parseBody } from '../validation.js';
import { clientAddress } from '../client-address.js';
import { countedSignIn } from '@lab/rate-limits';

/** POST /auth/v1/token: user sign-in with a password or a refresh token. */
export async function tokenGrant(ctx: Ctx, deps: Deps): Promise<Reply> {
  const b = parseBody(grantBody, ctx.body, 'invalid token request');
  const idc = deps.clients.identity();
  const caller = systemContext(ctx.requestId);
  let t;
  if (b.grant_type === 'password') {
    t = await countedSignIn(deps.limiter, { email: b.email, address: clientAddress(ctx.req) }, () =>
      idc.call('passwordGrant', { email: b.email, password: b.password }, caller),
    );
  } else {
    t = await idc.call('refreshGrant', { refresh_token: b.refresh_token }, caller);
    // the session's earlier tokens end now on this replica, not when the event arrives
    deps.auth.cache.dropTokens(t.revoked_token_ids);
  }
  return json(200, { access_token: t.access_token, token_type: 'bearer', expires_in: t.expires_in, refresh_token: t.refresh_token });
}

/**
 * POST /app/v1/experiments/:id/sign. The re-entered password is checked first; a
 * wrong one is 403 invalid_password (the session itself is valid, so 401 would
 * wrongly tell the client to sign in again).
 *
 * The check is a password attempt like a sign-in: counted against the account's
 * sign-in budgets (those the token endpoint and the OAuth form count on), 429
 * rate_limited past them. Unthrottled, a stolen session token would
 * let its holder guess the password at the token's request rate. A right password
 * gives its count back (countedSignIn): signing is routine work, and a researcher
 * signing a dozen entries in a minute must not lock their own sign-in.
 */
export async function signExperiment(ctx: Ctx, deps: Deps): Promise<Reply> {
  const id = recordId(ctx.params);
  const b = parseBody(signBody, ctx.body, 'invalid request body');
  const p = principalIn(ctx);
  const caller = callerIn(ctx);
  const idc = deps.clients.identity();
  let user;
  try {
    user = await idc.call('getUser', { user_id: p.user_id! }, caller);
    await countedSignIn(deps.limiter, { email: user.email, address: clientAddress(ctx.req) }, () =>
      idc.call('verifyPassword', { user_id: p.user_id!, password: b.password }, caller),
    );
  } catch (err) {
    if (err instanceof DomainError && err.kind === 'unauthenticated') {
      throw DomainError.forbidden('the password is not correct', 'invalid_password');
    }
    throw err;
  }
  // the manifest keeps the signer's name as it is at signing
  const r = await deps.clients.notebook().call('signExperiment', { id, meaning: b.meaning, signer_name: user.name ?? user.email }, caller);
  return itemFromJson(200, signedExperimentJson(r));
}
