"""The bounds on what password logins may cost (controller/logins.py), on a clock of the test's."""

from enclave_queue.auth.secrets import generate_password
from enclave_queue.controller.accounts import new_account_id
from enclave_queue.controller.logins import FAIL_WINDOW, FAILS, KNOWN_PER_USER, Logins


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_only_the_forms_enclave_makes_are_checked():
    user, password = new_account_id(), generate_password()
    assert Logins.well_formed(user, password)
    for bad_user, bad_password in [(user, password + "x"), (user, "é" * 43), (user, "p" * 100), (user, ""),
                                   (user.upper(), password), ("q" + "1" * 16, password), (user + "\n", password),
                                   ("", password), (user, password[:42] + " ")]:
        assert not Logins.well_formed(bad_user, bad_password), (bad_user, bad_password)


def test_a_username_is_throttled_after_its_failed_checks_until_the_window_passes():
    clock = Clock()
    logins = Logins(clock)
    user, other = new_account_id(), new_account_id()
    for _ in range(FAILS - 1):
        logins.checked(user, generate_password(), None)
    assert not logins.throttled(user)
    logins.checked(user, generate_password(), None)
    assert logins.throttled(user) and not logins.throttled(other)
    clock.now += FAIL_WINDOW / 2
    assert logins.throttled(user)
    clock.now += FAIL_WINDOW / 2 + 0.001
    assert not logins.throttled(user)


def test_a_known_password_passes_while_its_version_logs_in():
    logins = Logins(Clock())
    user, password = new_account_id(), generate_password()
    assert logins.known(user, password, [1]) is None
    logins.checked(user, password, 1)
    assert logins.known(user, password, [1, 2]) == 1
    assert logins.known(user, password, [2]) is None  # rotated with no grace: no longer
    assert logins.known(user, generate_password(), [1]) is None
    assert logins.known(new_account_id(), password, [1]) is None


def test_the_passwords_remembered_are_bounded():
    logins = Logins(Clock())
    user = new_account_id()
    passwords = [generate_password() for _ in range(KNOWN_PER_USER + 1)]
    for version, password in enumerate(passwords):
        logins.checked(user, password, version)
    live = range(len(passwords))
    assert logins.known(user, passwords[0], live) is None  # the oldest went
    assert [logins.known(user, p, live) for p in passwords[1:]] == list(range(1, len(passwords)))
