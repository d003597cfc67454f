-- An OAuth grant ends with the membership it was consented under (decision 050):
-- removing a member now revokes their grants in that organisation. Grants of
-- members removed before this migration are ended here, with their tokens, so a
-- refresh token kept through a removal does not work again if the member returns.
update identity.tokens t set revoked_at = now()
  from identity.oauth_grants g
  where t.grant_id = g.id and t.revoked_at is null and g.revoked_at is null
    and not exists (select 1 from identity.memberships m where m.org_id = g.org_id and m.user_id = g.user_id);

update identity.oauth_grants g set revoked_at = now()
  where g.revoked_at is null
    and not exists (select 1 from identity.memberships m where m.org_id = g.org_id and m.user_id = g.user_id);
