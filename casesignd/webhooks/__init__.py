"""Webhooks sent: the pure parts (refused addresses, what an attempt decides, the
signed headers) and the daemon's sender that delivers the outbox's rows, signed as
Standard Webhooks. An endpoint's settings and the events it receives are
:mod:`casesignd.core.webhook_events`', which the config and the store speak too.
"""
