-- Public OAuth clients, registered dynamically (RFC 7591) at the identity
-- provider by MCP clients: they hold no secret (a desktop app or IDE cannot keep
-- one), so every authorization of theirs must carry a PKCE S256 challenge, and
-- their grants are bound to one resource (RFC 8707), the MCP function.
alter table identity.oauth_clients alter column secret_hash drop not null;
alter table identity.oauth_clients add column public boolean not null default false;
-- a confidential client always has a secret, a public client never
alter table identity.oauth_clients add constraint oauth_clients_secret_check check (public = (secret_hash is null));

-- The resource (absolute URL) the grant's access tokens may be used at; null for
-- grants of confidential clients (the spec's oauth-authorize), whose tokens act on /v1.
alter table identity.oauth_grants add column resource text check (resource is null or length(resource) <= 2000);
