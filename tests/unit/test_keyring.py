"""Storage keys (casesignd.core.keyring) and their settings: wraps bound to their key
id and owner, key files read strictly, and [storage]'s checks."""

from __future__ import annotations

import os

import pytest

from casesignd import config
from casesignd.core.errors import ConfigError
from casesignd.core.keyring import Keyring, KeyUnavailable, WrappedKey, read_key_file

K1, K2 = os.urandom(32), os.urandom(32)


def ring(current: str = "k1", **keys: bytes) -> Keyring:
    return Keyring(encrypt=True, current=current, keys=keys or {"k1": K1})


def test_a_wrap_opens_only_for_its_key_id_and_owner():
    data_key = os.urandom(32)
    w = ring().wrap(data_key, "object:ab")
    assert w.key_id == "k1" and data_key not in w.wrapped
    assert ring().open(w) == data_key
    with pytest.raises(KeyUnavailable):  # moved to another owner's row
        ring().open(WrappedKey("object:cd", w.key_id, w.wrapped))
    both = ring("k1", k1=K1, k2=K2)
    with pytest.raises(KeyUnavailable):  # relabelled with another key id
        both.open(WrappedKey(w.owner, "k2", w.wrapped))
    with pytest.raises(KeyUnavailable, match="'k1'"):  # a key the config lacks
        ring("k2", k2=K2).open(w)


def test_rewrap_moves_a_data_key_under_the_current_key_and_leaves_it_once_there():
    data_key = os.urandom(32)
    old = ring().wrap(data_key, "artifact:art_1")
    both = ring("k2", k1=K1, k2=K2)
    new = both.rewrap(old)
    assert new is not None and new.key_id == "k2" and both.open(new) == data_key
    assert both.rewrap(new) is None
    assert "wrapped" not in repr(new) and K1.hex() not in repr(both)


@pytest.mark.parametrize("content, ok", [
    (K1.hex().encode() + b"\n", True), (K1, True), (K1.hex()[:-2].encode(), False),
    (b"z" * 64, False), (b"", False), (K1 + b"\n", False)])
def test_a_key_file_holds_64_hex_digits_or_32_bytes(tmp_path, content, ok):
    path = tmp_path / "k"
    path.write_bytes(content)
    if ok:
        assert read_key_file(path, "storage.key_file") == K1
    else:
        with pytest.raises(ConfigError) as e:
            read_key_file(path, "storage.key_file")
        assert K1.hex() not in str(e.value)


@pytest.mark.parametrize("storage, key", [
    ('encrypt = true', "storage.key_file"),
    ('encrypt = true\nkey_file = "k"', "storage.key_id"),
    ('key_id = "a"', "storage.key_id"),
    ('encrypt = true\nkey_file = "k"\nkey_id = "a b"', "storage.key_id"),
    ('key_file = "k"\nkey_id = "a"\n[[storage.old_keys]]\nid = "a"\nfile = "o"',
     "storage.old_keys[0].id"),
])
def test_storage_key_settings_are_checked(storage, key):
    with pytest.raises(ConfigError) as e:
        config.loads(f"[storage]\n{storage}\n")
    assert e.value.key == key


def test_keys_come_from_files_or_credentials(tmp_path, monkeypatch):
    (tmp_path / "new.key").write_text(K2.hex())
    creds = tmp_path / "creds"
    creds.mkdir()
    (creds / "old.key").write_bytes(K1)
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(creds))
    cfg = config.loads('[storage]\nencrypt = true\nkey_file = "new.key"\nkey_id = "b"\n'
                       '[[storage.old_keys]]\nid = "a"\nfile = "old.key"\n', base_dir=str(tmp_path))
    keyring = cfg.storage_keyring()
    assert keyring.current == "b" and keyring.keys == {"b": K2, "a": K1} and keyring.encrypt
    off = config.loads('[storage]\nkey_file = "new.key"\nkey_id = "b"\n', base_dir=str(tmp_path))
    assert not off.storage_keyring().encrypt and off.storage_keyring().ids == {"b"}
