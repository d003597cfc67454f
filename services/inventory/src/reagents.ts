import { z } from 'zod';
import { defineResource } from '@lab/records';
import { name, number, phrases, reference, short, text } from './fields.js';
import { canWriteInventory } from './permissions.js';

const optional = <T extends z.ZodType>(s: T) => s.nullable().optional();

const createReagent = z.strictObject({
  name,
  alias: optional(short),
  cas_number: optional(short),
  formula: optional(short),
  purity: optional(short),
  aggregate_state: optional(short),
  storage_temperature: optional(short),
  storage_class: optional(short),
  un_number: optional(short),
  description: optional(text),
  notes: optional(text),
  molecular_weight: optional(number),
  density: optional(number),
  flash_point: optional(number),
  signal_word: optional(z.enum(['danger', 'warning', 'none'], 'must be one of danger, warning, none')),
  h_phrases: phrases.optional(),
  p_phrases: phrases.optional(),
  hazard_pictograms: phrases.optional(),
  // only web links: a javascript: or file: URI must never reach a client's UI
  external_link: optional(z.url({ protocol: /^https?$/, error: 'must be an http:// or https:// URI' }).max(2000)),
  department_id: optional(reference),
});

/** Reagent catalog entries: what a substance is; stock items say how much of it is where. */
export const reagents = defineResource({
  name: 'reagents',
  record: 'reagent',
  table: 'inventory.reagents',
  auditResource: 'reagent',
  create: createReagent,
  // no create hooks: a create inserts its row and emits (decision 034)
  sharedCreates: true,
  update: createReagent.partial(),
  labels: ['name'],
  filters: {
    name: 'string',
    cas_number: 'string',
    signal_word: 'string',
    storage_class: 'string',
    aggregate_state: 'string',
    un_number: 'string',
    department_id: 'uuid',
  },
  orderBy: ['updated_at', 'name', 'cas_number'],
  references: { department_id: { noun: 'department', peer: 'department' } },
  canWrite: canWriteInventory,
});
