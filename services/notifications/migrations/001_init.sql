-- In-app notifications: one row per recipient. Rows are read by their owner
-- only, newest first, so the index leads with (org_id, user_id).

create table notifications.notifications (
  id uuid primary key,
  org_id uuid not null,
  user_id uuid not null,
  notification_type text not null check (char_length(notification_type) between 1 and 64),
  title text not null check (char_length(title) between 1 and 200),
  body text check (char_length(body) <= 2000),
  link_url text check (char_length(link_url) <= 2000),
  entry_id uuid,
  read_at timestamptz,
  created_at timestamptz not null default now()
);

create index notifications_owner_idx on notifications.notifications (org_id, user_id, created_at desc, id desc);
