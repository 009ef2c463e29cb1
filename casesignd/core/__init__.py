"""The vocabulary every other package shares, and nothing else: the error table and
exception tree, what an attempt ends in, structured logs, the audit chain's hashing,
media types by content, sealed (encrypted, authenticated) files, and the webhook events
with an endpoint's settings. It imports only the standard library, its own modules and
a few libraries (msgspec, cryptography).
"""
