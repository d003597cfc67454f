import { z } from 'zod';
import { isUuid, isoTimestamp } from '@lab/kit';

const dateTime = isoTimestamp();

/** The audit query; other keys are refused (org_id, the organisation selection, is taken out before). */
export const auditQuery = z
  .strictObject({
    limit: z.coerce.number().int().min(1).max(1000).default(100),
    since_created_at: dateTime.optional(),
    since_id: z.string().refine(isUuid, 'must be a UUID').meta({ format: 'uuid' }).optional(),
    from: dateTime.optional(),
    to: dateTime.optional(),
  })
  .refine((q) => (q.since_created_at === undefined) === (q.since_id === undefined), {
    error: 'since_created_at and since_id go together',
    path: ['since_id'],
  });
