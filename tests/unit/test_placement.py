"""Where a signature goes: the request's shape, the policy's default (pure)."""

from __future__ import annotations

import pytest

from casesignd.core.errors import ValidationError
from casesignd.core.policy import Policy
from casesignd.signing import placement


@pytest.mark.parametrize(("raw", "appearance", "field"), [
    ("Buyer", "visible", "signature"),
    ({}, "visible", "signature.field"),
    ({"field": ""}, "visible", "signature.field"),
    ({"field": "a\nb"}, "visible", "signature.field"),
    ({"field": "Buyer", "box": [1, 1, 50, 50]}, "visible", "signature"),
    ({"colour": "red"}, "visible", "signature"),  # the object, never the client's key
    ({"box": [1, 1, 50, 50]}, "invisible", "signature.box"),
    ({"page": 0, "box": [1, 1, 50, 50]}, "visible", "signature.page"),
    ({"page": True, "box": [1, 1, 50, 50]}, "visible", "signature.page"),
    ({"box": [50, 1, 1, 50]}, "visible", "signature.box"),
    ({"box": [1, 1, 50]}, "visible", "signature.box"),
    ({"box": [1, 1, 50, 1e9]}, "visible", "signature.box"),
    ({"visible": True}, "invisible", "signature.visible"),
    ({"visible": False}, "visible", "signature.visible"),
    ({"visible": True, "page": -1}, "visible", "signature.visible"),
])
def test_admission_refuses_a_bad_shape_naming_the_field(raw, appearance, field) -> None:
    with pytest.raises(ValidationError) as refused:
        placement.admit(raw, appearance)
    assert refused.value.field == field


@pytest.mark.parametrize(("signature", "policy", "expected"), [
    (None, {}, ("", None, False)),
    ({"field": "Buyer"}, {}, ("Buyer", None, False)),
    ({"field": "Buyer"}, {"appearance": "visible"}, ("Buyer", None, True)),
    (None, {"appearance": "visible"}, ("", (1, (36.0, 36.0, 236.0, 96.0)), True)),
    (None, {"appearance": "visible", "signature_field": "Seller"}, ("Seller", None, True)),
    ({"page": -1, "box": [1.0, 2.0, 30.0, 40.0]}, {"appearance": "visible"},
     ("", (-1, (1.0, 2.0, 30.0, 40.0)), True)),
])
def test_the_request_chooses_within_the_policy(signature, policy, expected) -> None:
    assert placement.placement(signature, Policy(version="p-1", **policy)) == expected


def test_visible_alone_is_the_policys_own_placement() -> None:
    assert placement.admit({"visible": True}, "visible") == {}


@pytest.mark.parametrize(("signature", "valid"), [
    ({"field": "Buyer"}, True),
    ({"page": -1, "box": [36, 36, 236, 96]}, True),
    ({"box": [36, 36, 236, 96]}, True),
    ({"visible": True}, True),
    ({"visible": False}, False),
    ({"field": "Buyer", "box": [36, 36, 236, 96]}, False),
    ({"page": 0, "box": [36, 36, 236, 96]}, False),
    ({"box": [36, 36, 236]}, False),
])
def test_the_openapi_document_describes_the_signature_object(signature, valid) -> None:
    validator = pytest.importorskip("openapi_schema_validator")
    from casesignd.http.openapi import document

    spec = document()
    schema = {"$ref": "#/components/schemas/SignaturePlacement",
              "components": spec["components"]}
    if valid:
        validator.validate(signature, schema, cls=validator.OAS31Validator)
    else:
        with pytest.raises(Exception):  # noqa: B017  # jsonschema's ValidationError
            validator.validate(signature, schema, cls=validator.OAS31Validator)
