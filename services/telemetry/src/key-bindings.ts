import { sql } from 'drizzle-orm';
import { z } from 'zod';
import type { telemetry } from '@lab/contracts';
import { assertOperatorOrSystem, parseWith, rows, sqlArray, validationFailed, type CallerContext, type FieldIssue, type ServiceDeps } from '@lab/kit';
import { uuid } from './common.js';

const bindings = z.object({ org_id: uuid, connector_id: z.union([z.literal(''), uuid]), device_ids: z.array(uuid).max(1000) });

/**
 * The operator binds an API key to a connector or to devices (management API);
 * identity keeps the binding but knows nothing of telemetry's records, so the
 * gateway asks here first. A connector id may name one that does not exist yet
 * (it comes into being with the key's first heartbeat), but not another
 * organisation's; every device must be one of this organisation's.
 */
export function keyBindingHandlers(deps: ServiceDeps) {
  return {
    checkKeyBindings: async (req: telemetry.KeyBindingsRequest, caller: CallerContext): Promise<telemetry.Empty> => {
      assertOperatorOrSystem(caller, 'binding API keys');
      const b = parseWith(bindings, req);
      const issues: FieldIssue[] = [];
      if (b.connector_id) {
        const [other] = await rows<{ id: string }>(
          deps.db.orm,
          sql`select id from telemetry.connectors where id = ${b.connector_id}::uuid and org_id <> ${b.org_id}::uuid`,
        );
        if (other) issues.push({ path: 'connector_id', message: 'names a connector of another organisation' });
      }
      if (b.device_ids.length) {
        const found = await rows<{ id: string }>(
          deps.db.orm,
          sql`select id::text from telemetry.devices where org_id = ${b.org_id}::uuid and id = any(${sqlArray(b.device_ids)}::uuid[])`,
        );
        const known = new Set(found.map((r) => r.id));
        b.device_ids.forEach((id, i) => {
          if (!known.has(id)) issues.push({ path: `device_ids.${i}`, message: 'is not a device of this organisation' });
        });
      }
      if (issues.length) throw validationFailed(issues, `invalid binding: ${issues[0]!.path} ${issues[0]!.message}`);
      return {};
    },
  };
}
