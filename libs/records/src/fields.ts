import { z } from 'zod';
import { isoDate, isoTimestamp } from '@lab/kit';

/**
 * The field vocabulary of record schemas, shared by every service that defines
 * resources, so a name, a date or a reference means the same everywhere. Domain
 * rules (allowed values, required fields) stay in each service's schemas.
 */
export const fields = {
  name: z.string().trim().min(1, 'must not be empty').max(500),
  /** a short free-form string (identifiers, classes, states) */
  short: z.string().trim().max(500),
  text: z.string().max(100_000),
  /** free-form status strings (the spec lists no allowed values) */
  status: z.string().trim().min(1, 'must not be empty').max(64),
  tags: z.array(z.string().trim().min(1).max(100)).max(100),
  reference: z.guid('must be a UUID'),
  /** a free-form JSON object (not an array, not null) */
  object: z.record(z.string(), z.unknown()),
  date: isoDate(),
  /** ISO 8601 with an offset (Z or ±hh:mm), as every timestamp on the wire */
  timestamp: isoTimestamp(),
};
