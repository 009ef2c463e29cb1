"""The vocabulary every other package shares, and nothing else: the error table and
exception tree, what an attempt ends in, structured logs, the audit chain's hashing,
media types by content, sealed (encrypted, authenticated) files, the webhook events
with an endpoint's settings, and the settings of the config's sections that one part
of the service decides on (a policy, the kiosk, retention, sources, a tenant's limits,
verify's budget), which the config reads from here. It imports only the standard
library, its own modules and a few libraries (msgspec, cryptography).
"""
