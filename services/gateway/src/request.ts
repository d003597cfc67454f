import type { Request } from 'express';
import type { FunctionsHost } from '@lab/functions';
import type { CallerContext, Logger } from '@lab/kit';
import type { Authenticator, Principal } from './auth.js';
import type { Clients } from './clients.js';
import type { AnsweredKeys } from './answered-keys.js';
import type { KeyedRefusals } from './idempotency.js';
import type { JobEventsHub } from '@lab/realtime';
import type { RateLimiter, RateState } from '@lab/rate-limits';
import type { Route } from '@lab/http-api';

/** One request as the handlers see it, once routing and authentication are done. */
export interface Ctx {
  req: Request;
  route: Route;
  params: Record<string, string>;
  requestId: string;
  /** the parsed JSON body, or undefined when none was sent */
  body: unknown;
  principal?: Principal;
  /** signed into every gRPC call of this request */
  caller?: CallerContext;
  rate?: RateState;
  /** a read's count still under way (see runRoute) */
  counting?: Promise<RateState>;
}

export interface Deps {
  log: Logger;
  clients: Clients;
  auth: Authenticator;
  limiter: RateLimiter;
  idempotency: KeyedRefusals;
  /** successful answers of keyed writes, replayed by this replica itself */
  answered: AnsweredKeys;
  /** what the functions base (@lab/functions) is lent of the gateway: functions-host.ts */
  functions: FunctionsHost;
  /** server-sent job.updated events (realtime channel background_jobs) */
  jobEvents: JobEventsHub;
}

/** The caller of an authenticated route (the pipeline sets it before any handler). */
export function callerIn(ctx: Ctx): CallerContext {
  if (!ctx.caller) throw new Error(`route ${ctx.route.method} ${ctx.route.path} has no caller`);
  return ctx.caller;
}

export function principalIn(ctx: Ctx): Principal {
  if (!ctx.principal) throw new Error(`route ${ctx.route.method} ${ctx.route.path} has no principal`);
  return ctx.principal;
}
