-- The W3C trace context of the code that enqueued a job ({"traceparent":
-- "00-...", "tracestate": ...}), so that its run's span joins that trace:
-- enqueue() fills it inside an active OpenTelemetry span, and SQL or Prisma
-- producers may set it themselves. Nullable with no default: adding it
-- rewrites no row.
ALTER TABLE job_queue ADD COLUMN trace_context jsonb;
