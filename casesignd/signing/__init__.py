"""Making PAdES signatures: the incremental update, CMS SignedData, keys (PKCS#12 and
PKCS#11), time stamps, revocation data and the long-term levels, visible stamps and the
document's own signature fields, the pipeline from a checked document to a signed one, and
the ladder every signature climbs (B-B → B-T → B-LT → B-LTA). Settings come in as values.
"""
