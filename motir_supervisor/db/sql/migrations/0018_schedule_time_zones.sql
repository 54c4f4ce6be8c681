-- The IANA time zone a schedule's cron expression is read in ("Europe/Paris"),
-- as its kind's @job declares it; NULL for UTC. The scheduler writes it with
-- each instant (enqueue_scheduled), and `status` and the dashboard read it to
-- show the schedule and compute its next instant.
ALTER TABLE job_queue_schedules ADD COLUMN tz text;
