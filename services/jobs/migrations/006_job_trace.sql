-- The W3C trace context of the request or event that made a job (traceparent,
-- tracestate; null when tracing is off): its runs are spans of that trace.
alter table jobs.jobs
  add column traceparent text,
  add column tracestate text;
