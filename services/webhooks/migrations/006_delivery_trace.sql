-- The W3C trace context of the event a delivery was fanned out from (traceparent,
-- tracestate; null when tracing is off): its attempts are spans of that trace, and
-- the receiver gets a traceparent header naming it.
alter table webhooks.deliveries
  add column traceparent text,
  add column tracestate text;
