-- The signature key of a job that signs (sign_case): a claim reads the signature
-- recorded for it in the same transaction.
ALTER TABLE jobs ADD COLUMN sig_key TEXT;
