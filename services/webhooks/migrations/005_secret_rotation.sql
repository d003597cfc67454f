-- Secret rotation. After a rotation the new secret signs (outbound) and verifies
-- (inbound), and the one it replaced keeps working until previous_secret_expires_at
-- (24 hours): outbound deliveries carry a v1 signature by each, inbound requests
-- may be signed with either. Stored like the current secret, for the same reason
-- (an HMAC needs the secret itself); never shown again after the rotation answer.
alter table webhooks.subscriptions
  add column previous_secret text,
  add column previous_secret_expires_at timestamptz,
  add column updated_at timestamptz not null default now();
alter table webhooks.inbound_endpoints
  add column previous_secret text,
  add column previous_secret_expires_at timestamptz,
  add column updated_at timestamptz not null default now();

-- The management lists page through an organisation's rows in creation order.
create index subscriptions_org_created_idx on webhooks.subscriptions (org_id, created_at, id);
create index inbound_endpoints_org_created_idx on webhooks.inbound_endpoints (org_id, created_at, id);
