"""relay_wire.sqswire.sign_request against the AWS Signature Version 4 test suite
(aws-sig-v4-test-suite, 2015-08-30: credentials AKIDEXAMPLE, region us-east-1, service
"service", 20150830T123600Z), the cases that apply to a service other than S3. Each expected
signature is the suite's published one; each case is also signed by botocore's own SigV4
signer, which must agree (but for repeated headers, which botocore's request cannot carry)."""

from __future__ import annotations

import hashlib
from datetime import datetime

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from relay_wire.sqswire import Signed, sign_request

ACCESS_KEY = "AKIDEXAMPLE"
SECRET_KEY = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
AMZ_DATE = "20150830T123600Z"
SCOPE = "20150830/us-east-1/service/aws4_request"
HOST = ("Host", "example.amazonaws.com")
DATE = ("X-Amz-Date", AMZ_DATE)
UNRESERVED = "-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
TOKEN = (
    "AQoDYXdzEPT//////////wEXAMPLEtc764bNrC9SAPBSM22wDOk4x4HIZ8j4FZTwdQWLWsKWHGBuFqwAeMicRXmxfpS"
    "PfIeoIYRqTflfKD8YUuwthAx7mSEI/qkPpKPi/kMcGdQrmGdeehM4IC1NtBmUpp2wUE8phUZampKsburEDy0KPkyQDYw"
    "T7WZ0wq5VSXDvp75YU9HFvlRd8Tx6q6fE8YQcHNVXAkiY9q6d+xo0rKwT38xVqr7ZD0u0iPPkUL64lIZbqBAz+scqKml"
    "zm8FDrypNC9Yjc8fPOLn9FX9KSYvKTr4rvx3iSIlTJabIQwj2ICCR/oLxBA=="
)
VANILLA = "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"

# (case, method, path and query as the request line has them, headers, body, signature)
VECTORS: list[tuple[str, str, str, str, list[tuple[str, str]], bytes, str]] = [
    ("get-vanilla", "GET", "/", "", [HOST, DATE], b"", VANILLA),
    ("get-vanilla-query", "GET", "/", "", [HOST, DATE], b"", VANILLA),
    (
        "get-vanilla-empty-query-key",
        "GET",
        "/",
        "Param1=value1",
        [HOST, DATE],
        b"",
        "a67d582fa61cc504c4bae71f336f98b97f1ea3c7a6bfe1b6e45aec72011b9aeb",
    ),
    (
        "get-vanilla-query-order-key-case",
        "GET",
        "/",
        "Param2=value2&Param1=value1",
        [HOST, DATE],
        b"",
        "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500",
    ),
    (
        "get-vanilla-query-order-key",
        "GET",
        "/",
        "Param1=value2&Param1=Value1",
        [HOST, DATE],
        b"",
        "eedbc4e291e521cf13422ffca22be7d2eb8146eecf653089df300a15b2382bd1",
    ),
    (
        # (aws-c-auth's copy of the suite: a query already percent-encoded, not encoded again)
        "get-vanilla-query-order-encoded",
        "GET",
        "/",
        "Param-3=Value3&Param=Value2&%E1%88%B4=Value1",
        [HOST, DATE],
        b"",
        "371d3713e185cc334048618a97f809c9ffe339c62934c032af5a0e595648fcac",
    ),
    (
        "get-vanilla-query-unreserved",
        "GET",
        "/",
        f"{UNRESERVED}={UNRESERVED}",
        [HOST, DATE],
        b"",
        "9c3e54bfcdf0b19771a7f523ee5669cdf59bc7cc0884027167c21bb143a40197",
    ),
    (
        "get-vanilla-utf8-query",
        "GET",
        "/",
        "ሴ=bar",
        [HOST, DATE],
        b"",
        "2cdec8eed098649ff3a119c94853b13c643bcf08f8b0a1d91e12c9027818dd04",
    ),
    (
        "get-unreserved",
        "GET",
        f"/{UNRESERVED}",
        "",
        [HOST, DATE],
        b"",
        "07ef7494c76fa4850883e2b006601f940f8a34d404d0cfa977f52a65bbf5f24f",
    ),
    (
        "get-utf8",
        "GET",
        "/ሴ",
        "",
        [HOST, DATE],
        b"",
        "8318018e0b0f223aa2bbf98705b62bb787dc9c0e678f255a891fd03141be5d85",
    ),
    (
        "normalize-path/get-space",
        "GET",
        "/example space/",
        "",
        [HOST, DATE],
        b"",
        "652487583200325589f1fba4c7e578f72c47cb61beeca81406b39ddec1366741",
    ),
    ("normalize-path/get-relative", "GET", "/example/..", "", [HOST, DATE], b"", VANILLA),
    (
        "normalize-path/get-relative-relative",
        "GET",
        "/example1/example2/../..",
        "",
        [HOST, DATE],
        b"",
        VANILLA,
    ),
    ("normalize-path/get-slash", "GET", "//", "", [HOST, DATE], b"", VANILLA),
    ("normalize-path/get-slash-dot-slash", "GET", "/./", "", [HOST, DATE], b"", VANILLA),
    (
        "normalize-path/get-slash-pointless-dot",
        "GET",
        "/./example",
        "",
        [HOST, DATE],
        b"",
        "ef75d96142cf21edca26f06005da7988e4f8dc83a165a80865db7089db637ec5",
    ),
    (
        "normalize-path/get-slashes",
        "GET",
        "//example//",
        "",
        [HOST, DATE],
        b"",
        "9a624bd73a37c9a373b5312afbebe7a714a789de108f0bdfe846570885f57e84",
    ),
    (
        "get-header-value-trim",
        "GET",
        "/",
        "",
        [HOST, ("My-Header1", " value1"), ("My-Header2", ' "a   b   c"'), DATE],
        b"",
        "acc3ed3afb60bb290fc8d2dd0098b9911fcaa05412b367055dee359757a9c736",
    ),
    (
        "get-header-key-duplicate",
        "GET",
        "/",
        "",
        [HOST, ("My-Header1", "value2"), ("My-Header1", "value2"), ("My-Header1", "value1"), DATE],
        b"",
        "c9d5ea9f3f72853aea855b47ea873832890dbdd183b4468f858259531a5138ea",
    ),
    (
        "get-header-value-order",
        "GET",
        "/",
        "",
        [HOST, *[("My-Header1", f"value{n}") for n in (4, 1, 3, 2)], DATE],
        b"",
        "08c7e5a9acfcfeb3ab6b2185e75ce8b1deb5e634ec47601a50643f830c755c01",
    ),
    (
        "post-vanilla",
        "POST",
        "/",
        "",
        [HOST, DATE],
        b"",
        "5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b",
    ),
    (
        "post-vanilla-query",
        "POST",
        "/",
        "Param1=value1",
        [HOST, DATE],
        b"",
        "28038455d6de14eafc1f9222cf5aa6f1a96197d7deb8263271d420d138af7f11",
    ),
    (
        "post-header-key-sort",
        "POST",
        "/",
        "",
        [HOST, ("My-Header1", "value1"), DATE],
        b"",
        "c5410059b04c1ee005303aed430f6e6645f61f4dc9e1461ec8f8916fdf18852c",
    ),
    (
        "post-header-value-case",
        "POST",
        "/",
        "",
        [HOST, ("My-Header1", "VALUE1"), DATE],
        b"",
        "cdbc9802e29d2942e5e10b5bccfdd67c5f22c7c4e8ae67b53629efa58b974b7d",
    ),
    (
        "post-x-www-form-urlencoded",
        "POST",
        "/",
        "",
        [("Content-Type", "application/x-www-form-urlencoded"), HOST, DATE],
        b"Param1=value1",
        "ff11897932ad3f4e8b18135d722051e5ac45fc38421b1da7b9d196a0fe09473a",
    ),
    (
        "post-x-www-form-urlencoded-parameters",
        "POST",
        "/",
        "",
        [("Content-Type", "application/x-www-form-urlencoded; charset=utf8"), HOST, DATE],
        b"Param1=value1",
        "1a72ec8f64bd914b0e42e42607c7fbce7fb2c7465f63e3092b3b0d39fa77a6fe",
    ),
    (
        "post-sts-token/post-sts-header-before",
        "POST",
        "/",
        "",
        [HOST, DATE, ("X-Amz-Security-Token", TOKEN)],
        b"",
        "85d96828115b5dc0cfc3bd16ad9e210dd772bbebba041836c64533a82be05ead",
    ),
]


def _sign(
    method: str, path: str, query: str, headers: list[tuple[str, str]], body: bytes
) -> Signed:
    return sign_request(
        method,
        path,
        query,
        headers,
        body,
        access_key=ACCESS_KEY,
        secret_key=SECRET_KEY,
        region="us-east-1",
        service="service",
        amz_date=AMZ_DATE,
    )


@pytest.mark.parametrize(
    ("case", "method", "path", "query", "headers", "body", "signature"),
    VECTORS,
    ids=[vector[0] for vector in VECTORS],
)
def test_the_suites_published_signature(
    case: str,
    method: str,
    path: str,
    query: str,
    headers: list[tuple[str, str]],
    body: bytes,
    signature: str,
) -> None:
    signed = _sign(method, path, query, headers, body)
    digest = hashlib.sha256(signed.canonical_request.encode()).hexdigest()
    assert signed.string_to_sign == f"AWS4-HMAC-SHA256\n{AMZ_DATE}\n{SCOPE}\n{digest}"
    assert signed.signature == signature
    names = ";".join(sorted({name.lower() for name, _ in headers}))
    assert signed.authorization == (
        f"AWS4-HMAC-SHA256 Credential={ACCESS_KEY}/{SCOPE}, SignedHeaders={names}, "
        f"Signature={signature}"
    )


# The suite's canonical requests (its .creq files), where they show a rule at work.
CANONICAL = {
    "get-vanilla": (
        "GET\n/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\n"
        f"host;x-amz-date\n{EMPTY_SHA256}"
    ),
    "get-vanilla-query-order-key": (
        "GET\n/\nParam1=Value1&Param1=value2\nhost:example.amazonaws.com\n"
        f"x-amz-date:20150830T123600Z\n\nhost;x-amz-date\n{EMPTY_SHA256}"
    ),
    "get-vanilla-utf8-query": (
        "GET\n/\n%E1%88%B4=bar\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\n"
        f"host;x-amz-date\n{EMPTY_SHA256}"
    ),
    "get-utf8": (
        "GET\n/%E1%88%B4\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\n"
        f"host;x-amz-date\n{EMPTY_SHA256}"
    ),
    "normalize-path/get-space": (
        "GET\n/example%20space/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\n"
        f"host;x-amz-date\n{EMPTY_SHA256}"
    ),
    "normalize-path/get-slashes": (
        "GET\n/example/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\n"
        f"host;x-amz-date\n{EMPTY_SHA256}"
    ),
    "get-header-value-trim": (
        'GET\n/\n\nhost:example.amazonaws.com\nmy-header1:value1\nmy-header2:"a b c"\n'
        f"x-amz-date:20150830T123600Z\n\nhost;my-header1;my-header2;x-amz-date\n{EMPTY_SHA256}"
    ),
    "get-header-value-order": (
        "GET\n/\n\nhost:example.amazonaws.com\nmy-header1:value4,value1,value3,value2\n"
        f"x-amz-date:20150830T123600Z\n\nhost;my-header1;x-amz-date\n{EMPTY_SHA256}"
    ),
    "post-x-www-form-urlencoded": (
        "POST\n/\n\ncontent-type:application/x-www-form-urlencoded\nhost:example.amazonaws.com\n"
        "x-amz-date:20150830T123600Z\n\ncontent-type;host;x-amz-date\n"
        "9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e"
    ),
}
# and two of its strings to sign (.sts), hashes of the canonical request as published
STRING_TO_SIGN_DIGEST = {
    "get-vanilla": "bb579772317eb040ac9ed261061d46c1f17a8133879d6129b6e1c25292927e63",
    "normalize-path/get-space": "63ee75631ed7234ae61b5f736dfc7754cdccfedbff4b5128a915706ee9390d86",
}


@pytest.mark.parametrize("case", sorted(CANONICAL))
def test_the_suites_canonical_request(case: str) -> None:
    (_, method, path, query, headers, body, _) = next(v for v in VECTORS if v[0] == case)
    signed = _sign(method, path, query, headers, body)
    assert signed.canonical_request == CANONICAL[case]
    if case in STRING_TO_SIGN_DIGEST:
        assert signed.string_to_sign.endswith(STRING_TO_SIGN_DIGEST[case])


@pytest.mark.parametrize(
    ("case", "method", "path", "query", "headers", "body", "signature"),
    [v for v in VECTORS if len({n for n, _ in v[4]}) == len(v[4])],  # (no repeated header)
    ids=[v[0] for v in VECTORS if len({n for n, _ in v[4]}) == len(v[4])],
)
def test_botocores_signer_agrees(
    case: str,
    method: str,
    path: str,
    query: str,
    headers: list[tuple[str, str]],
    body: bytes,
    signature: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("botocore.auth.get_current_datetime", lambda: datetime(2015, 8, 30, 12, 36))
    given = dict(headers)
    token = given.pop("X-Amz-Security-Token", None)
    given.pop("X-Amz-Date")  # botocore writes its own, from the clock above
    # The query as parameters: botocore takes a URL's query as it is, without encoding it.
    params = [item.partition("=")[::2] for item in query.split("&") if item]
    request = AWSRequest(
        method=method,
        url=f"https://example.amazonaws.com{path}",
        params=params,
        headers=given,
        data=body,
    )
    if case == "get-vanilla-query-order-encoded":  # already encoded: botocore would again
        request = AWSRequest(
            method=method, url=f"https://example.amazonaws.com{path}?{query}", headers=given
        )
    SigV4Auth(Credentials(ACCESS_KEY, SECRET_KEY, token), "service", "us-east-1").add_auth(request)
    assert request.headers["Authorization"].endswith(f"Signature={signature}")
