"""What an operator runs beside the daemon: ``init`` and the development PKI, backups and
restores, and the store's own check and copy.
"""
