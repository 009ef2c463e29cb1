-- The W3C traceparent of the request that admitted a job: its attempts' spans
-- continue that trace, on whichever node claims it and after a restart
-- (casesignd.observability.tracing). NULL when tracing is off.
ALTER TABLE jobs ADD COLUMN traceparent TEXT;
