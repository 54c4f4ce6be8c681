"""How the testing helpers match a payload: what a dict holds, at any depth."""

from motir_supervisor.testing import payload_holds


def test_a_payload_holds_what_is_expected_at_any_depth():
    payload = {"to": "a", "tags": [1, 2], "meta": {"lang": "fr", "n": 1}}
    assert payload_holds(payload, {})
    assert payload_holds(payload, {"meta": {"lang": "fr"}, "tags": [1, 2]})
    assert not payload_holds(payload, {"tags": [1]})  # a list is compared whole
    assert not payload_holds(payload, {"meta": {"lang": "en"}})
    assert not payload_holds(payload, {"missing": None})
    assert not payload_holds([1, 2], {"to": "a"})
