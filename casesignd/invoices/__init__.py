"""Invoices as documents: the released templates and their layout, text shaping and
bidi, fonts, money, locales and each tenant's branding. It renders; the job kind that signs and
publishes an invoice lives in :mod:`casesignd.job_kinds`.
"""
