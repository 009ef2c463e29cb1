"""Files the daemon holds outside the database: per-attempt temp areas under a quota,
the content-addressed object store, published artifacts and their links, sources fetched for an
attempt, and the malware scanner.
"""
