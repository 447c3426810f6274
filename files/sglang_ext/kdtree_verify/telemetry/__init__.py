"""What the patch reports: the marker line and status file (`marker`), the counters, the status
publisher, the Prometheus text and multiprocess metrics, validate mode's statistics, and the
status-directory reader (`statusdir`).

Empty on purpose: `marker` is imported on the start-up error path, and `marker`, `metrics` and
`statusdir` are also loaded by file path (stdlib only, no import of this package).
"""
