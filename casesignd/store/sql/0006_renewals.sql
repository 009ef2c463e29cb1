-- A B-LTA artifact's last document timestamp proves what it covers while that
-- timestamp's chain is valid: when the chain expires, and the artifact that renewed
-- it ([archive] renew_before_days schedules renewals; extend_signature makes them).
ALTER TABLE artifacts ADD COLUMN timestamp_expires_at REAL;
ALTER TABLE artifacts ADD COLUMN renewed_by TEXT;
CREATE INDEX artifacts_renewal ON artifacts (timestamp_expires_at)
    WHERE timestamp_expires_at IS NOT NULL AND renewed_by IS NULL;
