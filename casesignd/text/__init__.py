"""Text as drawn: the shipped fonts and which characters they draw, Arabic shaping,
the bidirectional order of a line, font runs, widths and line breaks. The invoices and
the visible signature stamp draw their text with it; it draws nothing of its own.
"""
