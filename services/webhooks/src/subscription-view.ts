import { sql } from 'drizzle-orm';
import type { webhooks } from '@lab/contracts';
import { iso } from './admin-common.js';
import type { SignatureScheme } from './signature-schemes.js';

/** A subscription as the management API shows it, selected and shaped in one place. */
export const SUBSCRIPTION_COLUMNS = sql`id::text, org_id::text, url, events, active, disabled_reason, signature_scheme,
  ${iso('created_at')} as created_at, ${iso('updated_at')} as updated_at,
  case when previous_secret_expires_at > now() then ${iso('previous_secret_expires_at')} end as previous_secret_expires_at`;

export interface SubscriptionRow {
  id: string;
  org_id: string;
  url: string;
  events: string[];
  active: boolean;
  disabled_reason: string | null;
  signature_scheme: SignatureScheme;
  created_at: string;
  updated_at: string;
  previous_secret_expires_at: string | null;
}

/** The wire shape without a secret ('' is proto's unset; the gateway leaves it out). */
export const toSubscription = (r: SubscriptionRow): webhooks.Subscription => ({
  ...r,
  secret: '',
  disabled_reason: r.disabled_reason ?? undefined,
  previous_secret_expires_at: r.previous_secret_expires_at ?? undefined,
});
