"""The kinds of work the engine runs, each behind :mod:`casesignd.engine.kinds`:
signing a case, rendering an invoice, extending a signature, and renewals on a schedule.
"""
