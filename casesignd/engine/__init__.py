"""The job engine, with no knowledge of what a job does: the plug-in interface of job
kinds, pure decisions about jobs, the worker pool, outcome recording, pacing, the CPU lanes,
reservations of idempotency keys and retention.
"""
