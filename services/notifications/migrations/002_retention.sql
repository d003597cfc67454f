-- Retention (src/retention.ts) deletes notifications by age every hour; the
-- owner index leads with org_id and cannot serve that.
create index notifications_created_idx on notifications.notifications (created_at);
