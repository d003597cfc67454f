-- When each monitored point last alerted its organisation's quality managers
-- (src/breach-alerts.ts): one row per point that ever breached.
create table notifications.breach_alerts (
  org_id uuid not null,
  point_key text not null,
  notified_at timestamptz not null,
  primary key (org_id, point_key)
);
