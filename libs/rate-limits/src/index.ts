/**
 * The rate limits, one mechanism the gateway and the functions base both count
 * against: a per-key budget over a minute and an hour (Redis shared by the
 * replicas, or memory; failing open), the password-attempt budgets every sign-in
 * door shares, the bucketed counters of anonymous doors and the operator door.
 */
export {
  bucketKey,
  countedOperator,
  countedSignIn,
  DEFAULT_LIMITS,
  RateLimitedError,
  RateLimiter,
  SIGN_IN_BUCKETS,
  signInKey,
  type Limits,
  type RateState,
} from './rate-limit.js';
