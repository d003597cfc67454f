import { z } from 'zod';

/**
 * An organisation's request limits as a management body carries them, with
 * the one set of bounds: the gateway's request schema (which also refuses
 * unknown fields) and identity's own validation both use this.
 */
export const RATE_LIMIT_BOUNDS = { per_minute: 1_000_000, per_hour: 100_000_000 } as const;

export const rateLimitBody = z.object({
  per_minute: z.number().int().min(1).max(RATE_LIMIT_BOUNDS.per_minute),
  per_hour: z.number().int().min(1).max(RATE_LIMIT_BOUNDS.per_hour),
});
