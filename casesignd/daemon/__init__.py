"""The running daemon: the services it builds and tears down in order, and the entry
point that wires them to the HTTP application.
"""
