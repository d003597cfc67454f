import { sql } from 'drizzle-orm';
import { rows, type Emitter, type Tx } from '@lab/kit';
import type { WebhooksConfig } from './config.js';

/**
 * The auto-disable rule: a subscription is switched off (active = false,
 * disabled_reason set) when every delivery that ended since its last
 * successful one has failed, there are at least `disableMinFailures` of them,
 * and the oldest of them ended `disableAfterMs` (24 h) ago or more; i.e. the
 * receiver has accepted nothing for a day despite repeated attempts. Checked
 * whenever a delivery ends failed, in that transaction. Pending deliveries of
 * a disabled subscription are still attempted; new events create none.
 */
export async function disableIfFailing(tx: Tx, emit: Emitter, cfg: WebhooksConfig, orgId: string, subscriptionId: string): Promise<boolean> {
  // Serialise the checks of one subscription: two failures ending together
  // would otherwise each count only itself and neither reach the threshold.
  const [sub] = await rows<{ active: boolean }>(
    tx,
    sql`select active from webhooks.subscriptions where org_id = ${orgId}::uuid and id = ${subscriptionId}::uuid for update`,
  );
  if (!sub?.active) return false;
  const [stats] = await rows<{ failures: number; failing_long_enough: boolean }>(
    tx,
    sql`with last_ok as (
          select max(delivered_at) as at from webhooks.deliveries
          where org_id = ${orgId}::uuid and subscription_id = ${subscriptionId}::uuid and status = 'delivered'
        )
        select count(*)::int as failures,
               coalesce(min(failed_at) <= now() - (${cfg.disableAfterMs} * interval '1 millisecond'), false) as failing_long_enough
        from webhooks.deliveries, last_ok
        where org_id = ${orgId}::uuid and subscription_id = ${subscriptionId}::uuid and status = 'failed'
          and (last_ok.at is null or failed_at > last_ok.at)`,
  );
  if (!stats || stats.failures < cfg.disableMinFailures || !stats.failing_long_enough) return false;
  const reason = `${stats.failures} deliveries failed and none succeeded for at least ${Math.round(cfg.disableAfterMs / 3600_000)} h`;
  const updated = await rows<{ id: string }>(
    tx,
    sql`update webhooks.subscriptions set active = false, disabled_reason = ${reason}, disabled_at = now()
        where org_id = ${orgId}::uuid and id = ${subscriptionId}::uuid and active returning id::text`,
  );
  if (!updated.length) return false;
  emit.audit(orgId, {
    action: 'update',
    resource: 'webhook_subscription',
    record_id: subscriptionId,
    before: { active: true, disabled_reason: null },
    after: { active: false, disabled_reason: reason },
  });
  return true;
}
