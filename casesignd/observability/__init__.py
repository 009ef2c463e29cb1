"""What the daemon tells the systems that watch it: Prometheus metrics (no personal
data), systemd notifications and the watchdog, and optional OpenTelemetry traces. Nothing here
decides anything about a job.
"""
