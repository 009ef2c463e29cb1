"""casesignd: a signing and document-rendering daemon with a durable job engine."""

__version__ = "0.1.0"
