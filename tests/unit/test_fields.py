"""The one field-validation helper (casesignd.core.fields): an unknown key is counted,
never echoed; the other checks keep their codes and messages."""

from __future__ import annotations

import pytest

from casesignd.core.errors import ValidationError
from casesignd.core.fields import (
    integer,
    object_field,
    plain_text,
    query_integer,
    refuse_unknown,
    required,
)

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


@pytest.mark.parametrize("value", [None, True, 1.5, "3", -1, 11])
def test_an_integer_out_of_its_range_or_type_is_refused(value):
    with pytest.raises(ValidationError) as e:
        integer(value, "items[0].size", 0, 10, label="size")
    assert (e.value.code, e.value.field, e.value.message) == (
        "invalid_field", "items[0].size", "size must be an integer from 0 to 10")
    assert integer(10, "n", 0, 10) == 10


@pytest.mark.parametrize("raw,want", [(None, 50), ("1", 1), ("200", 200), ("0", None),
                                      ("201", None), ("ten", None), ("", None)])
def test_a_query_integer_takes_its_default_and_its_range(raw, want):
    if want is not None:
        assert query_integer(raw, "limit", 50, 1, 200, code="invalid_limit") == want
        return
    with pytest.raises(ValidationError) as e:
        query_integer(raw, "limit", 50, 1, 200, code="invalid_limit")
    assert (e.value.code, e.value.field, e.value.message) == (
        "invalid_limit", "limit", "limit must be an integer from 1 to 200")
