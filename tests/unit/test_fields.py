"""The one field-validation helper (casesignd.core.fields): an unknown key is counted,
never echoed; the other checks keep their codes and messages."""

from __future__ import annotations

import pytest

from casesignd.core.errors import ValidationError
from casesignd.core.fields import object_field, plain_text, refuse_unknown, required

HOSTILE = ("<script>alert(1)</script>", "tok_4f9c2e77d1a0b3c5e6f8", "", "k" * 10_000)


@pytest.mark.parametrize("key", HOSTILE)
@pytest.mark.parametrize("where", ["", "items[2]"])
def test_an_unknown_key_is_refused_without_being_echoed(key, where):
    with pytest.raises(ValidationError) as e:
        refuse_unknown({"name": 1, key: 2}, ("name", "size"), where)
    err = e.value
    assert (err.code, err.field, err.status) == ("unknown_field", where or None, 422)
    assert err.message == f"{where or 'the body'} has an unknown field; it allows name, size"
    assert not key or key not in err.message + str(err.detail) + str(err.where)


def test_unknown_keys_are_counted_and_known_ones_pass():
    refuse_unknown({"name": 1}, ("name",))
    with pytest.raises(ValidationError, match="^the body has 3 unknown fields; it allows name$"):
        refuse_unknown({"a": 1, "b": 2, 3: 3}, ("name",))


@pytest.mark.parametrize("call,code,message", [
    (lambda: required(None, "order"), "missing_field", "order is required"),
    (lambda: object_field([], "items[0]"), "invalid_field", "items[0] must be an object"),
    (lambda: plain_text("", "name", 5), "invalid_field", "name must be a string of 1 to 5 characters"),
    (lambda: plain_text("abcdef", "name", 5), "invalid_field",
     "name must be a string of 1 to 5 characters"),
    (lambda: plain_text("a\u202eb", "name", 5), "invalid_field",
     "name must not contain control characters"),
])
def test_each_check_keeps_its_code_and_message(call, code, message):
    with pytest.raises(ValidationError) as e:
        call()
    assert (e.value.code, e.value.message) == (code, message)


def test_what_passes_is_returned_as_is():
    assert required(0, "n") == 0
    assert object_field({"a": 1}, "o") == {"a": 1}
    assert plain_text("Acme Ltd", "name", 200) == "Acme Ltd"
