"""The AdminClient's path parts: each checked against its rule, then percent-encoded; a bad one
is a SpecError naming the field and the rule, raised before any request; a redirect is an error."""

import httpx
import pytest

from enclave_queue.admin import AdminClient, _raise_for_problem, check_path_part, url_path
from enclave_queue.errors import EnclaveError, SpecError

RECEIPT = "Zm9v-YmFy_0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"

GOOD = [
    ("project", "d"), ("project", "default"), ("project", "iso-other"), ("project", "p" + "x" * 39),
    ("queue name", "abc"), ("queue name", "emails"), ("queue name", "t1-dlq"), ("queue name", "q" + "0" * 39),
    ("secret name", "emails-password"), ("secret name", "q" * 40 + "-password"),
    ("receipt", RECEIPT), ("receipt", "a"), ("receipt", "A" * 4096),
    ("redrive id", "r1f2e3d4c"),
    ("sequence", 1), ("sequence", 2**63 - 1),
]

BAD = [
    ("project", ""), ("project", ".."), ("project", "x/../other"), ("project", "Default"), ("project", "1abc"),
    ("project", "p" * 41), ("project", "default\n"), ("project", None),
    ("queue name", ""), ("queue name", "ab"), ("queue name", "../../other/queues/victim"),
    ("queue name", "q/credentials"), ("queue name", "a" * 41), ("queue name", "emails\n"),
    ("queue name", "émails"), ("queue name", "em%2fails"), ("queue name", "em?ls"), ("queue name", "em#ls"),
    ("queue name", "em ls"), ("queue name", "-emails"), ("queue name", "emails\x00"), ("queue name", 123),
    ("secret name", "x" * 50), ("secret name", "../secret"), ("secret name", ""), ("secret name", "-password"),
    ("receipt", ""), ("receipt", "abc/../../../hqc"), ("receipt", "%2e%2e"), ("receipt", "abc=="),
    ("receipt", "a.b"), ("receipt", "abc\n"), ("receipt", "A" * 4097), ("receipt", "ab cd"), ("receipt", "ａｂｃ"),
    ("redrive id", ""), ("redrive id", "r1/../x"),
    ("sequence", 0), ("sequence", -1), ("sequence", 2**63), ("sequence", True), ("sequence", "5"),
    ("sequence", 1.0), ("sequence", None),
]


@pytest.mark.parametrize(("field", "value"), GOOD)
def test_a_good_part_goes_into_the_path_as_it_is(field, value):
    assert check_path_part(field, value) == str(value)


@pytest.mark.parametrize(("field", "value"), BAD)
def test_a_bad_part_is_a_spec_error_naming_the_field_and_the_rule(field, value):
    with pytest.raises(SpecError) as raised:
        check_path_part(field, value)
    assert str(raised.value).startswith(f"{field} must be ")
    assert raised.value.errors[0]["field"] == field


@pytest.mark.parametrize(("field", "value", "message"), [
    ("queue name", "../x",
     "queue name must be 3–40 lowercase letters, digits or hyphens, starting with a letter (got '../x')."),
    ("project", "",
     "project must be 1–40 lowercase letters, digits or hyphens, starting with a letter (got '')."),
    ("receipt", "a/b", "receipt must be 1–4096 characters of URL-safe base64 (A–Z, a–z, 0–9, '-', '_') "
                       "starting with a letter, as 'receive' gave it (got 'a/b')."),
    ("receipt", "-pX", "receipt must be 1–4096 characters of URL-safe base64 (A–Z, a–z, 0–9, '-', '_') "
                       "starting with a letter, as 'receive' gave it (got '-pX')."),
    ("receipt", "a/" * 50, "receipt must be 1–4096 characters of URL-safe base64 (A–Z, a–z, 0–9, '-', '_') "
                           "starting with a letter, as 'receive' gave it (got 'a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/'… (100 characters))."),
    ("sequence", 0, "sequence must be an integer from 1 to 9223372036854775807 (got 0)."),
    ("queue name", "a\x1b]0;x\x07", "queue name must be 3–40 lowercase letters, digits or hyphens, starting with "
                                    "a letter (got 'a\\x1b]0;x\\x07')."),
])
def test_the_sentences(field, value, message):
    with pytest.raises(SpecError) as raised:
        check_path_part(field, value)
    assert str(raised.value) == message


def test_url_path_checks_and_encodes_parts_and_keeps_literals():
    assert url_path("v1", "projects", ("project", "default"), "queues", ("queue name", "emails"), "messages",
                    ("receipt", RECEIPT)) == f"/v1/projects/default/queues/emails/messages/{RECEIPT}"
    assert url_path("v1", ("sequence", 42), "retry") == "/v1/42/retry"
    with pytest.raises(SpecError, match=r"^queue name must be"):
        url_path("v1", ("queue name", "a/b"))


def test_every_method_checks_its_parts_before_any_request():
    """A closed port: a request would be BrokerUnavailable, so a SpecError means none was made."""
    client = AdminClient("http://127.0.0.1:9", None)
    calls = [
        lambda: client.list_queues("../x"),
        lambda: client.create_queue("../x", {"name": "abc"}),
        lambda: client.get_queue("default", "q/credentials"),
        lambda: client.update_queue("default", "../x", {}),
        lambda: client.delete_queue("default", "../../other/queues/victim"),
        lambda: client.queue_status("default", ""),
        lambda: client.credentials("x/..", "abc"),
        lambda: client.read_secret("default", "../../queues/abc/credentials"),
        lambda: client.wait_ready("default", "a/b", timeout=1),
        lambda: client.wait_deleted("default", "a/b", timeout=1),
        lambda: client.list_dead_letters("default", ".."),
        lambda: client.retry_dead_letter("default", "abc", 0),
        lambda: client.discard_dead_letter("default", "abc", -5),
        lambda: client.start_redrive("default", "a?b"),
        lambda: client.redrive_status("default", "abc", "r1/../x"),
        lambda: client.cancel_redrive("default", "abc", ""),
        lambda: client.send("default", "a#b", "x"),
        lambda: client.receive("default", "A"),
        lambda: client.delete_message("default", "abc", "abc/../../../hqc"),
        lambda: client.delete_message("default", "abc", ""),
        lambda: client.nack_message("default", "abc", "a.b"),
        lambda: client.peek("default", "ab"),
        lambda: client.export("default", "../x"),
        lambda: client.clear("default", "../x"),
        lambda: client.stats("", "abc"),
    ]
    with client:
        for call in calls:
            with pytest.raises(SpecError):
                call()


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_a_redirect_is_an_error(status):
    request = httpx.Request("DELETE", "http://api.invalid/v1/projects/default/queues/abc/messages/")
    response = httpx.Response(status, headers={"location": "http://api.invalid/elsewhere"}, request=request)
    with pytest.raises(EnclaveError, match=rf"^The Enclave API answered {status} .*'http://api.invalid/elsewhere'"
                                           r".*not followed"):
        _raise_for_problem(response)


def test_the_client_does_not_follow_redirects():
    with AdminClient("http://127.0.0.1:9", None) as client:
        assert client._http.follow_redirects is False
