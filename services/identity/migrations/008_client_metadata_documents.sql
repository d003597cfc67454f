-- Public OAuth clients named by a client ID metadata document
-- (draft-ietf-oauth-client-id-metadata-document, MCP authorization 2025-11-25):
-- their client_id is the https URL of a JSON document listing their redirect
-- URIs. The gateway fetches and checks the document; identity keeps a row per
-- URL (the name and redirect URIs of the document last seen), so grants, codes
-- and tokens point at a row as for any other client. A deleted row leaves the URL
-- free: the client may sign in again, as a deleted registered client may register
-- again.
alter table identity.oauth_clients add column metadata_url text
  check (metadata_url is null or (public and length(metadata_url) <= 2000));
create unique index oauth_clients_metadata_url_idx on identity.oauth_clients (metadata_url)
  where metadata_url is not null and deleted_at is null;
