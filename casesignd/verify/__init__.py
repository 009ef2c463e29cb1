"""Checking signatures someone else made, with pyHanko: the AdES indication of each
signature, what changed after it, the report (JSON and ETSI TS 119 102-2), and the budget one
document may spend.
"""
