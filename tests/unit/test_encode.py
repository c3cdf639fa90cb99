"""The body codec (envelope.encode): the server and the SDK share it, so its bytes are pinned to
the compact ``json.dumps`` it has always written."""

import json
import math

import pytest

from enclave_queue import envelope
from enclave_queue.errors import SpecError


@pytest.mark.parametrize("body", [
    {"n": 1, "s": "x"}, [1, 2.5, None, True], {"été": "naïve \u2603", "nested": {"a": [{}]}}, 0, -1.25e-7, None,
    {"k": "line\nbreak\t\"quoted\""}, {"z": 1, "a": 2}, {1: "int key"},
])
def test_a_json_body_is_the_compact_json_dumps_it_always_was(body):
    assert envelope.encode(body) == (json.dumps(body, separators=(",", ":")).encode(), {"Content-Type": envelope.JSON})


def test_a_body_json_cannot_hold_is_refused_naming_the_body():
    with pytest.raises(SpecError, match=r"^body must be .* \(Object of type object is not JSON serializable\)"):
        envelope.encode({"when": object()})
    with pytest.raises(SpecError, match="Circular reference"):
        loop: list = []
        loop.append(loop)
        envelope.encode(loop)
    for body in ([math.inf, -math.inf], {"x": math.nan}):  # json.dumps writes them bare: no reader takes that
        with pytest.raises(SpecError, match=r"\(NaN or an infinity\)\.$"):
            envelope.encode(body)


@pytest.mark.parametrize(("body", "data", "headers"), [
    (b"raw", b"raw", None), (bytearray(b"ba"), b"ba", None), (memoryview(b"mv"), b"mv", None),
    ("text é", "text é".encode(), {"Content-Type": envelope.TEXT}),
])
def test_bytes_travel_as_they_are_and_str_as_utf8_text(body, data, headers):
    assert envelope.encode(body) == (data, headers)
