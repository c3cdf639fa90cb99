"""AWS Signature Version 4, checked on the server side: pure functions over a request's method, path,
query, headers and body, and the secret of the access key it names.

The canonical request and the string to sign are built as AWS specifies them for every service
but S3 (the path normalised and URI-encoded once, the query sorted, the signed headers trimmed,
the body's SHA-256). ``parse_authorization`` reads the ``Authorization`` header; ``check`` verifies
the signature, the credential scope (the date, the configured region, the service ``sqs``) and the
clock (15 minutes either side, as AWS). Every refusal is an SqsError with the code AWS gives:
``MissingAuthenticationToken``, ``IncompleteSignature``, ``SignatureDoesNotMatch``. Which key
exists (``InvalidClientTokenId``) is the caller's to say (keys.py), before the body is read.
"""

from __future__ import annotations

import hashlib
import hmac
import posixpath
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from urllib.parse import quote, unquote

from .errors import SqsError

ALGORITHM = "AWS4-HMAC-SHA256"
SERVICE = "sqs"
TERMINATOR = "aws4_request"
MAX_SKEW = timedelta(minutes=15)  #: how far a request's date may be from the server's clock
AMZ_DATE = "%Y%m%dT%H%M%SZ"
UNSIGNED = "UNSIGNED-PAYLOAD"

_FIELD = re.compile(r"\s*(Credential|SignedHeaders|Signature)\s*=\s*([^,]*)")
_SPACES = re.compile(r"\s+")


@dataclass(frozen=True)
class Authorization:
    """What an ``Authorization: AWS4-HMAC-SHA256 …`` header says."""

    access_key_id: str
    date: str  #: YYYYMMDD of the credential scope
    region: str
    service: str
    terminator: str
    signed_headers: tuple[str, ...]
    signature: str

    @property
    def scope(self) -> str:
        return f"{self.date}/{self.region}/{self.service}/{self.terminator}"


def incomplete(message: str) -> SqsError:
    return SqsError("IncompleteSignature", message)


def mismatch(message: str = "") -> SqsError:
    return SqsError("SignatureDoesNotMatch", message or (
        "The request signature we calculated does not match the signature you provided. Check your AWS Secret "
        "Access Key and signing method. Consult the service documentation for details."), 403)


def parse_authorization(header: str | None) -> Authorization:
    """The parts of an Authorization header; MissingAuthenticationToken without one, IncompleteSignature
    for one that is not a whole SigV4 header."""
    if not header:
        raise SqsError("MissingAuthenticationToken", "Request is missing Authentication Token: sign it with AWS "
                                                     "Signature Version 4 and an Enclave access key.", 403)
    algorithm, _, rest = header.strip().partition(" ")
    if algorithm != ALGORITHM:
        raise incomplete(f"Unsupported authorization type '{algorithm[:40]}': only {ALGORITHM} (Signature "
                         "Version 4) is accepted.")
    fields = {m.group(1): m.group(2).strip() for m in _FIELD.finditer(rest)}
    missing = [name for name in ("Credential", "SignedHeaders", "Signature") if not fields.get(name)]
    if missing:
        raise incomplete(f"Authorization header requires '{missing[0]}' parameter.")
    parts = fields["Credential"].split("/")
    if len(parts) != 5 or not all(parts):
        raise incomplete("Credential must be <access key id>/<date>/<region>/<service>/aws4_request.")
    signed = tuple(fields["SignedHeaders"].lower().split(";"))
    if "host" not in signed:
        raise incomplete("SignedHeaders must include 'host'.")
    return Authorization(parts[0], parts[1], parts[2], parts[3], parts[4], signed, fields["Signature"].lower())


def _encode(text: str, safe: str = "-_.~") -> str:
    return quote(text, safe=safe)


def canonical_path(raw_path: str) -> str:
    """The path as sent (still percent-encoded), dot segments removed, URI-encoded once more: every
    service but S3 signs the path encoded twice."""
    path = raw_path or "/"
    normal = posixpath.normpath(path) if path != "/" else "/"
    if path.endswith("/") and normal != "/":
        normal += "/"
    if normal.startswith("//"):
        normal = "/" + normal.lstrip("/")
    return _encode(normal, safe="/-_.~")


def canonical_query(raw_query: str) -> str:
    """The query string sorted by name then value, each part URI-encoded (space as %20)."""
    pairs = []
    for item in raw_query.split("&") if raw_query else []:
        if not item:
            continue
        key, _, value = item.partition("=")
        pairs.append((_encode(unquote(key.replace("+", " "))), _encode(unquote(value.replace("+", " ")))))
    return "&".join(f"{k}={v}" for k, v in sorted(pairs))


def canonical_headers(headers: Iterable[tuple[str, str]], signed: tuple[str, ...]) -> str:
    values: dict[str, list[str]] = {}
    for name, value in headers:
        values.setdefault(name.lower(), []).append(_SPACES.sub(" ", value.strip()))
    lines = []
    for name in signed:
        if name not in values:
            raise mismatch(f"The header '{name}' is listed in SignedHeaders but is not in the request.")
        lines.append(f"{name}:{','.join(values[name])}\n")
    return "".join(lines)


def string_to_sign(auth: Authorization, amz_date: str, method: str, raw_path: str, raw_query: str,
                   headers: Iterable[tuple[str, str]], payload_hash: str) -> str:
    canonical = "\n".join([method.upper(), canonical_path(raw_path), canonical_query(raw_query),
                           canonical_headers(headers, auth.signed_headers), ";".join(auth.signed_headers),
                           payload_hash])
    return "\n".join([ALGORITHM, amz_date, auth.scope, hashlib.sha256(canonical.encode()).hexdigest()])


def signing_key(secret: str, date: str, region: str, service: str = SERVICE) -> bytes:
    key = hmac.new(f"AWS4{secret}".encode(), date.encode(), hashlib.sha256).digest()
    for part in (region, service, TERMINATOR):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    return key


def request_date(headers: Mapping[str, str]) -> tuple[str, datetime]:
    """The request's ``X-Amz-Date`` (or ``Date``) as sent and as a time; IncompleteSignature without one."""
    text = headers.get("x-amz-date")
    if text:
        try:
            return text, datetime.strptime(text, AMZ_DATE).replace(tzinfo=UTC)
        except ValueError:
            raise incomplete(f"X-Amz-Date must be {AMZ_DATE.replace('%', '')} (ISO 8601 basic), got {text[:40]!r}.") \
                from None
    raise incomplete("Authorization requires an X-Amz-Date header.")


def check_scope(auth: Authorization, when: datetime, amz_date: str, regions: frozenset[str],
                now: datetime | None = None) -> None:
    """SignatureDoesNotMatch for a credential scoped elsewhere (another date, region or service),
    or a request signed more than 15 minutes away from the server's clock."""
    if auth.terminator != TERMINATOR:
        raise mismatch(f"Credential should be scoped with a valid terminator: '{TERMINATOR}', not "
                       f"'{auth.terminator[:40]}'.")
    if auth.service != SERVICE:
        raise mismatch(f"Credential should be scoped to correct service: '{SERVICE}'.")
    if "*" not in regions and auth.region not in regions:
        raise mismatch(f"Credential should be scoped to a valid region, not '{auth.region[:40]}': this endpoint "
                       f"accepts {', '.join(sorted(regions))} (ENCLAVE_SQS_REGION).")
    if auth.date != amz_date[:8]:
        raise mismatch(f"Date in Credential scope does not match YYYYMMDD from ISO-8601 version of date from HTTP: "
                       f"'{auth.date[:8]}' != '{amz_date[:8]}', from '{amz_date}'.")
    now = now or datetime.now(UTC)
    if when < now - MAX_SKEW:
        raise mismatch(f"Signature expired: {amz_date} is now earlier than {(now - MAX_SKEW).strftime(AMZ_DATE)} "
                       f"({now.strftime(AMZ_DATE)} - 15 min.)")
    if when > now + MAX_SKEW:
        raise mismatch(f"Signature not yet current: {amz_date} is still later than "
                       f"{(now + MAX_SKEW).strftime(AMZ_DATE)} ({now.strftime(AMZ_DATE)} + 15 min.)")


def payload_hash(headers: Mapping[str, str], body: bytes) -> str:
    """The body's SHA-256 as the canonical request carries it. A declared ``x-amz-content-sha256``
    must be the body's own (UNSIGNED-PAYLOAD is not accepted: the body is what is signed)."""
    digest = hashlib.sha256(body).hexdigest()
    declared = headers.get("x-amz-content-sha256")
    if declared is not None and declared.lower() != digest:
        raise mismatch("The x-amz-content-sha256 header does not match the SHA-256 of the body.")
    return digest


def verify(auth: Authorization, secret: str, amz_date: str, method: str, raw_path: str, raw_query: str,
           headers: Iterable[tuple[str, str]], payload_digest: str) -> None:
    """SignatureDoesNotMatch unless ``auth.signature`` is this request's signature under ``secret``."""
    text = string_to_sign(auth, amz_date, method, raw_path, raw_query, headers, payload_digest)
    expected = hmac.new(signing_key(secret, auth.date, auth.region, auth.service), text.encode(),
                        hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, auth.signature):
        raise mismatch()
