import { sql } from 'drizzle-orm';
import type { webhooks } from '@lab/contracts';
import { iso } from './admin-common.js';

/** An inbound endpoint as the management API shows it (never its secret), selected and shaped in one place. */
export const ENDPOINT_COLUMNS = sql`id::text, org_id::text, slug, allowed_event_types, job_type, active,
  ${iso('created_at')} as created_at, ${iso('updated_at')} as updated_at,
  case when previous_secret_expires_at > now() then ${iso('previous_secret_expires_at')} end as previous_secret_expires_at`;

export interface EndpointViewRow {
  id: string;
  org_id: string;
  slug: string;
  allowed_event_types: string[];
  job_type: string | null;
  active: boolean;
  created_at: string;
  updated_at: string;
  previous_secret_expires_at: string | null;
}

/** The wire shape; secret '' is proto's unset, which the gateway leaves out. */
export const toEndpoint = (r: EndpointViewRow): webhooks.InboundEndpoint => ({
  ...r,
  secret: '',
  job_type: r.job_type ?? undefined,
  previous_secret_expires_at: r.previous_secret_expires_at ?? undefined,
});
