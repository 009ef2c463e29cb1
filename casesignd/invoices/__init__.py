"""Invoices as documents: the released templates and their layout, money, locales and
each tenant's branding, their text drawn with :mod:`casesignd.text`. It renders; the job
kind that signs and publishes an invoice lives in :mod:`casesignd.job_kinds`.
"""
