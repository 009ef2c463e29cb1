"""Webhooks: the pure parts (a tenant's endpoints, which events they receive, the
payload) and the daemon's sender that delivers the outbox's rows, signed as Standard Webhooks.
"""
