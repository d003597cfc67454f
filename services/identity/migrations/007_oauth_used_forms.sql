-- Consent forms already decided (decision 049). The authorization pages keep no
-- session: a form is a signed state, valid for 10 minutes. Without a record of
-- its use the same form (state and CSRF cookie) could be posted again for another
-- code, or allow after deny. The form's nonce is recorded when its decision is
-- taken, in the database so every gateway replica sees it; a row is needed only
-- until the form expires anyway, and is then purged by retention.
create table identity.oauth_used_forms (
  form_id text primary key check (length(form_id) between 16 and 100),
  expires_at timestamptz not null
);
create index oauth_used_forms_expires_at_idx on identity.oauth_used_forms (expires_at);
