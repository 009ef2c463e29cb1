-- Storage encryption ([storage] encrypt, casesignd.core.keyring): the data key of each
-- sealed object (owner "object:<sha256>") and artifact ("artifact:<artifact_id>"),
-- wrapped by the key-encryption key named key_id. The key never leaves this table
-- unwrapped; erasing what it sealed deletes its row (secure_delete zeroes the page),
-- and `casesignd store rekey` rewraps rows under the current key.
CREATE TABLE data_keys (
  owner       TEXT PRIMARY KEY,
  key_id      TEXT NOT NULL,
  wrapped     BLOB NOT NULL,
  created_at  REAL NOT NULL
);
CREATE INDEX data_keys_key_id ON data_keys (key_id);

-- The last case that holds a blob takes its data key with it: looked up by digest.
CREATE INDEX objects_sha256 ON objects (sha256);

-- An artifact the store keeps itself (artifact_data) is sealed under a data key of its
-- own, wrapped beside it in its row: written, and erased, with its bytes. NULL: plain.
ALTER TABLE artifact_data ADD COLUMN key_id TEXT;
ALTER TABLE artifact_data ADD COLUMN wrapped_key BLOB;
