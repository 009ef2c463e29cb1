"""The vocabulary every other package shares, and nothing else: the error table and
exception tree, what an attempt ends in, structured logs, the audit chain's hashing, and
media types by content. It imports only the standard library and its own modules.
"""
