import { z } from 'zod';
import { isoTimestamp, jsonProblem, MAX_LIST_OFFSET } from '@lab/kit';

/**
 * The request bodies and queries of the orders service, validated here at its
 * edge (the gateway forwards them as given). Text is bounded everywhere; a
 * sample's fields follow the notebook's sample schema, so a body that passes
 * here is one the notebook accepts, and bad input is refused before anything is
 * written.
 */

const text = (max: number) => z.string().trim().min(1, 'must not be empty').max(max);
const optionalText = (max: number) => z.string().trim().max(max).nullable().optional();
/** a free-form JSON object (not an array, not null) */
const object = z.record(z.string(), z.unknown());

const PRIORITIES = ['routine', 'urgent', 'stat'] as const;
const ORDER_STATUSES = ['receiving', 'received', 'failed'] as const;
const MAX_SAMPLES_PER_ORDER = 200;

const requester = z.strictObject({
  name: text(200),
  email: z.email('must be an e-mail address').max(320).nullable().optional(),
  organisation: optionalText(200),
});

const orderSample = z.strictObject({
  name: text(500),
  type: optionalText(200),
  metadata: object.optional(),
  external_sample_id: text(200).nullable().optional(),
});

/**
 * POST /v1/lab-orders. The requester is given as an object or, for systems
 * that only know a name, as requester_name (exactly one of the two). Text with
 * an unpaired surrogate is refused here: the notebook could not store such a
 * sample, and the order would fail half-way with a 500 instead of a 400.
 */
export const createOrderBody = z
  .strictObject({
    external_order_number: text(100),
    requester: requester.optional(),
    requester_name: text(200).optional(),
    priority: z.enum(PRIORITIES).default('routine'),
    notes: z.string().max(10_000).nullable().optional(),
    samples: z.array(orderSample).min(1, 'an order has at least one sample').max(MAX_SAMPLES_PER_ORDER),
  })
  .superRefine((b, ctx) => {
    if ((b.requester === undefined) === (b.requester_name === undefined)) {
      ctx.addIssue({ code: 'custom', path: ['requester'], message: 'give either requester or requester_name' });
    }
    const seen = new Set<string>();
    b.samples.forEach((s, i) => {
      if (!s.external_sample_id) return;
      if (seen.has(s.external_sample_id)) {
        ctx.addIssue({ code: 'custom', path: ['samples', i, 'external_sample_id'], message: 'is repeated within the order' });
      }
      seen.add(s.external_sample_id);
    });
    const problem = jsonProblem(b);
    if (problem?.kind === 'unstorable') {
      ctx.addIssue({ code: 'custom', path: problem.path.split('.'), message: 'must not contain NUL characters or unpaired surrogates' });
    }
  });
export type CreateOrderBody = z.infer<typeof createOrderBody>;

const guid = z.guid('must be a UUID').transform((s) => s.toLowerCase());
const timestamp = isoTimestamp();

/** POST /v1/lab-orders/{id}/results */
export const recordResultBody = z.strictObject({
  sample_id: guid,
  analyte: text(200),
  value: z.union([z.number(), z.string().max(10_000)], 'must be a number or a string'),
  unit: optionalText(64),
  reference_range: optionalText(200),
  flag: optionalText(32),
  measured_at: timestamp.nullable().optional(),
});

const INT = /^\d+$/;
const intIn = (min: number, max: number) =>
  z
    .string()
    .regex(INT, `must be an integer from ${min} to ${max}`)
    .transform(Number)
    .pipe(z.number().int().min(min, `must be an integer from ${min} to ${max}`).max(max, `must be an integer from ${min} to ${max}`));

/** GET /v1/lab-orders (query values arrive as strings; unknown keys are 400). */
export const listOrdersQuery = z.strictObject({
  limit: intIn(1, 500).default(50),
  offset: intIn(0, MAX_LIST_OFFSET).default(0),
  status: z.enum(ORDER_STATUSES).optional(),
  priority: z.enum(PRIORITIES).optional(),
  external_order_number: text(100).optional(),
});

/**
 * GET /v1/lab-results: released results only. `since` is an inclusive lower
 * bound on released_at; limit cannot exceed the row cap (default: the cap).
 */
export const listResultsQuery = (rowCap: number) =>
  z.strictObject({
    order_id: guid.optional(),
    external_order_number: text(100).optional(),
    sample_id: guid.optional(),
    since: timestamp.optional(),
    limit: intIn(1, rowCap).optional(),
    offset: intIn(0, MAX_LIST_OFFSET).default(0),
  });
