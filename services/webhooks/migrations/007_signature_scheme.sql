-- How a subscription's deliveries are signed: 'x-service-signature' (the
-- X-Service-Signature header, what every subscription used before) or
-- 'standard-webhooks' (webhook-id, webhook-timestamp, webhook-signature). The
-- secret is stored as before, as given: an HMAC needs the key itself.
alter table webhooks.subscriptions
  add column signature_scheme text not null default 'x-service-signature'
    check (signature_scheme in ('x-service-signature', 'standard-webhooks'));
