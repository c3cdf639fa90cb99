"""The dead-letter provenance MAC (auth/provenance.py), alone."""

import pytest

from enclave_queue.auth.provenance import FIELDS, Provenance
from enclave_queue.envelope import PROVENANCE, SOURCE_QUEUE

KEY = Provenance(b"k" * 32)
HEADERS = {SOURCE_QUEUE: "emails", "Enclave-Source-Project": "default", "Enclave-Receive-Count": "3",
           "Content-Type": "text/plain"}


def test_a_signed_letter_is_vouched_for_as_written():
    signed = KEY.sign("qdlq", HEADERS, b"body")
    assert KEY.vouched("qdlq", signed, b"body") == signed


@pytest.mark.parametrize("change", [
    lambda h, b, q: ({**h, SOURCE_QUEUE: "victim"}, b, q),           # another source
    lambda h, b, q: ({**h, "Enclave-Receive-Count": "1"}, b, q),     # another count
    lambda h, b, q: (h, b"other body", q),                            # the headers over another body
    lambda h, b, q: (h, b, "qother"),                                 # on another dead-letter queue
    lambda h, b, q: ({k: v for k, v in h.items() if k != PROVENANCE}, b, q),  # no MAC at all
])
def test_anything_else_loses_its_provenance_and_keeps_the_rest(change):
    headers, body, queue = change(KEY.sign("qdlq", HEADERS, b"body"), b"body", "qdlq")
    vouched = KEY.vouched(queue, headers, body)
    assert not set(vouched) & {*FIELDS, PROVENANCE}
    assert vouched["Content-Type"] == "text/plain"


def test_another_key_does_not_vouch():
    signed = Provenance(b"x" * 32).sign("qdlq", HEADERS, b"body")
    assert SOURCE_QUEUE not in KEY.vouched("qdlq", signed, b"body")


def test_copy_ids_are_unguessable_and_stable():
    assert KEY.move_id("qa", 1) == KEY.move_id("qa", 1)
    assert len({KEY.move_id("qa", 1), KEY.move_id("qa", 2), KEY.move_id("qb", 1), KEY.redrive_id("qa", 1, {}),
                Provenance(b"x" * 32).move_id("qa", 1)}) == 5
    assert "qa" not in KEY.move_id("qa", 1)


def test_a_replayed_letter_is_redriven_as_the_same_copy():
    letter = {SOURCE_QUEUE: "emails", "Enclave-Source-Project": "default", "Enclave-Source-Sequence": "7"}
    assert KEY.redrive_id("qdlq", 3, letter) == KEY.redrive_id("qdlq", 9, letter)  # two places, one origin
    assert KEY.redrive_id("qdlq", 3, {}) != KEY.redrive_id("qdlq", 9, {})
    assert KEY.redrive_id("qdlq", 3, letter) != KEY.redrive_id("qdlq", 3, {**letter, "Enclave-Source-Sequence": "8"})
