-- Retention (src/retention.ts) deletes settled deliveries and inbound events by
-- age every hour; without these it would scan both tables each time.
create index deliveries_settled_created_idx on webhooks.deliveries (created_at) where status <> 'pending';
create index inbound_events_received_idx on webhooks.inbound_events (received_at);
