"""The vocabulary every other package shares, and nothing else: the error table and
exception tree, what an attempt ends in, structured logs, the audit chain's hashing,
media types by content, and the webhook events with an endpoint's settings. It imports
only the standard library and its own modules.
"""
