"""envelope.whole_number: how numbers that others send (SQS parameters and attributes, an app's word to
the mover, a deadline note) are read, rather than with ``int()``."""

import pytest

from enclave_queue.envelope import whole_number


@pytest.mark.parametrize(("value", "number"), [
    (3, 3), ("3", 3), (" 3 ", 3), ("-1", -1), (3.0, 3), ("0", 0),
    (2.5, None), (float("inf"), None), (float("nan"), None), ("1e3", None), ("1_000", None), ("\u0663", None),
    (True, None), (None, None), ("", None), ("+3", None), ("9" * 21, None), ([3], None),
])
def test_a_whole_number_is_digits_or_an_integral_number_and_nothing_int_would_bend(value, number):
    assert whole_number(value) == number
