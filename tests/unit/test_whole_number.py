"""envelope.whole_number: how numbers that others send (SQS parameters and attributes, an app's word to
the mover, a deadline note) are read, rather than with ``int()``."""

import pytest

from enclave_queue.envelope import message_id, prior_attempts, whole_number


@pytest.mark.parametrize(("value", "number"), [
    (3, 3), ("3", 3), (" 3 ", 3), ("-1", -1), (3.0, 3), ("0", 0),
    (2.5, None), (float("inf"), None), (float("nan"), None), ("1e3", None), ("1_000", None), ("\u0663", None),
    (True, None), (None, None), ("", None), ("+3", None), ("9" * 21, None), ([3], None),
])
def test_a_whole_number_is_digits_or_an_integral_number_and_nothing_int_would_bend(value, number):
    assert whole_number(value) == number


@pytest.mark.parametrize(("headers", "id_", "attempts"), [
    ({}, 7, 0), ({"Enclave-Id": "5", "Enclave-Prior-Attempts": "3"}, 5, 3),
    ({"Enclave-Id": "1_0", "Enclave-Prior-Attempts": "\u0663"}, 7, 0), ({"Enclave-Prior-Attempts": "-2"}, 7, 0),
    # a copy is stored after what it copies; an app's claim past that, or of a billion prior attempts, is no copy's
    ({"Enclave-Id": "12"}, 7, 0), ({"Enclave-Id": "0"}, 7, 0), ({"Enclave-Id": "-7"}, 7, 0),
    ({"Enclave-Prior-Attempts": "99999999999999999999"}, 7, 0), ({"Enclave-Prior-Attempts": "1000001"}, 7, 0),
])
def test_the_headers_any_client_may_write_are_read_as_whole_numbers(headers, id_, attempts):
    assert (message_id(headers, 7), prior_attempts(headers)) == (id_, attempts)
