import { z } from 'zod';

/** The page of the dead letters of every service of the deployment (GET /admin/v1/dead-letters). */
export const deadLettersQuery = z
  .object({
    limit: z.coerce.number().int().min(1).max(200).default(50),
    offset: z.coerce.number().int().min(0).max(1_000_000).default(0),
  })
  .strict();
