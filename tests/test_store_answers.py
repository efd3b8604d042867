"""What the server said decides what a bucket error says (issue 34): a missing bucket only where
S3 says NoSuchBucket, a web page or a wrong port called what it is, a bucket in another region
followed there, a KMS key's refusal named as such, the endpoint s3fs users set, and every error
saying its URL once.

Answers no test server gives (an HTML 404, S3's 301 to a bucket's region, S3's 403 naming
kms:Decrypt) are canned by the fault proxy (tests/faultproxy.py) in front of moto, in the shapes
AWS documents and sends: the 301 ``PermanentRedirect`` with ``x-amz-bucket-region`` and no
``Location`` (S3's error responses, "PermanentRedirect"), the 403 ``AccessDenied`` whose message
names ``kms:Decrypt`` (boto/boto3#2952, aws/aws-cli#6713).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import stores
from faultproxy import FaultProxy, Request, Rule

from ckptdoctor.stores import session
from ckptdoctor.testing import write_burn_run

pytestmark = pytest.mark.slow  # a real S3 server on 127.0.0.1

pytest.importorskip("obstore")

HTML = "<!DOCTYPE html><html><head><title>404 Not Found</title></head><body><h1>Not Found</h1></body></html>"
LISTING = r"^/[^/]+/?$"
"""A request to the bucket itself (a listing, or a HEAD of the bucket), not to one of its objects."""


@pytest.fixture
def proxy(moto_bucket: stores.Bucket, monkeypatch: pytest.MonkeyPatch) -> Iterator[FaultProxy]:
    """The proxy in front of the test's moto server, and the CLI pointed at it."""
    with FaultProxy(moto_bucket.endpoint) as running:
        monkeypatch.setenv("AWS_ENDPOINT_URL", running.endpoint)
        yield running


@pytest.fixture
def run_url(moto_bucket: stores.Bucket, tmp_path: Path) -> str:
    write_burn_run(tmp_path / "run", [1, 2])
    return moto_bucket.upload(tmp_path / "run", "run")


def one_line(result: Any) -> str:
    assert result.exit_code == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    [line] = result.stderr.strip().splitlines()
    return str(line)


# --- item 5: errors told apart by what the server said ----------------------------------------


@pytest.mark.usefixtures("no_retries")  # obstore would retry the 502 ten times
@pytest.mark.parametrize(
    ("status", "body"),
    [(404, HTML), (404, ""), (502, HTML), (403, HTML), (401, HTML)],
    ids=["html-404", "empty-404", "html-502", "html-403", "html-401"],
)
def test_an_answer_that_is_not_s3s_is_not_called_a_missing_bucket(
    proxy: FaultProxy, run_url: str, cli: Any, status: int, body: str
) -> None:
    proxy.arm(Rule("answer", status=status, headers={"Content-Type": "text/html"}, body=body))
    line = one_line(cli("inspect", run_url))
    assert "no such bucket" not in line
    assert f"answered HTTP {status} to a listing, which is not an S3 answer" in line
    assert "is AWS_ENDPOINT_URL the S3 API's address?" in line and proxy.endpoint in line  # the setting that chose it
    assert proxy.injected["answer"] >= 1


def test_a_missing_bucket_is_still_said_where_s3_says_so(moto_bucket: stores.Bucket, cli: Any) -> None:
    line = one_line(cli("inspect", "s3://no-such-bucket-here/run"))
    assert "no such bucket" in line and "NoSuchBucket" in line


# --- item 7: what bucket users configure --------------------------------------------------------


def test_fsspecs_endpoint_is_read_for_the_data_and_the_control_plane(
    moto_bucket: stores.Bucket, run_url: str, inspect_json: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """s3fs's order: ``FSSPEC_S3_ENDPOINT_URL`` (handed to ``S3FileSystem(endpoint_url=...)``)
    before ``AWS_ENDPOINT_URL``, which botocore reads only where no endpoint is passed."""
    with FaultProxy(moto_bucket.endpoint) as proxy:
        monkeypatch.setenv("FSSPEC_S3_ENDPOINT_URL", proxy.endpoint)
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{stores.free_port()}")  # nothing listens there
        result = inspect_json(run_url)
        assert result.exit_code == 0, result.stderr
        assert [run["path"] for run in result.json["runs"]] == [run_url]
        agents = {request.headers.get("user-agent", "").split("/")[0] for request in proxy.requests}
    assert any("obstore" in agent or "object_store" in agent for agent in agents), agents
    assert any("Boto3" in agent or "Botocore" in agent for agent in agents), agents  # the control plane's listing of uploads


def signed_for(request: Request) -> str | None:
    found = re.search(r"Credential=[^/]+/\d{8}/([^/]+)/s3/", request.headers.get("authorization", ""))
    return found.group(1) if found else None


REDIRECT = (
    '<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>PermanentRedirect</Code><Message>The bucket you are attempting to access'
    " must be addressed using the specified endpoint. Please send all future requests to this endpoint.</Message>"
    "<Endpoint>s3.eu-west-1.amazonaws.com</Endpoint><Bucket>{bucket}</Bucket></Error>"
)


def test_a_bucket_in_another_region_is_followed_there(
    moto_bucket: stores.Bucket, run_url: str, proxy: FaultProxy, inspect_json: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """S3 answers a request signed for another region than the bucket's with a 301 naming the
    region only in ``x-amz-bucket-region`` (obstore: "Received redirect without LOCATION")."""
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    proxy.arm(
        Rule(
            "answer",
            status=301,
            headers={"x-amz-bucket-region": "eu-west-1", "Content-Type": "application/xml"},
            body=REDIRECT.format(bucket=moto_bucket.name),
            when=lambda request: signed_for(request) != "eu-west-1",
        )
    )
    result = inspect_json(run_url)
    assert result.exit_code == 0, result.stderr
    assert [run["path"] for run in result.json["runs"]] == [run_url]
    assert proxy.injected["answer"] >= 1
    boto3_requests = [r for r in proxy.requests if "Boto3" in r.headers.get("user-agent", "")]
    assert boto3_requests and all(signed_for(r) == "eu-west-1" for r in boto3_requests)  # the control plane signs for it too


def test_a_redirect_naming_no_region_says_which_setting_to_change(
    moto_bucket: stores.Bucket, run_url: str, proxy: FaultProxy, cli: Any
) -> None:
    proxy.arm(Rule("answer", status=301, headers={"Content-Type": "application/xml"}, body=REDIRECT.format(bucket=moto_bucket.name)))
    line = one_line(cli("inspect", run_url))
    assert "the bucket is not in us-east-1: set AWS_REGION to its region" in line
    assert f"get-bucket-location --bucket {moto_bucket.name}" in line


KMS_DENIALS = [
    "User: arn:aws:iam::123456789012:user/trainer is not authorized to perform: kms:Decrypt on resource: "
    "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab because no identity-based policy allows the kms:Decrypt action",
    "The ciphertext refers to a customer master key that does not exist, does not exist in this region, or you are not allowed to access.",
]


@pytest.mark.parametrize("message", KMS_DENIALS, ids=["not-authorized", "ciphertext"])
def test_a_kms_keys_refusal_names_kms_decrypt(proxy: FaultProxy, run_url: str, inspect_json: Any, message: str) -> None:
    body = f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>AccessDenied</Code><Message>{message}</Message></Error>'
    proxy.arm(Rule("answer", method="GET", path=r"\.bpk$", status=403, headers={"Content-Type": "application/xml"}, body=body))
    result = inspect_json(run_url)
    messages = [f["message"] for f in result.json["findings"]] + [
        f["message"] for run in result.json["runs"] for f in run.get("findings", [])
    ]
    said = [m for m in messages if "kms:Decrypt" in m]
    assert said, messages
    assert all("kms:Decrypt on the bucket's KMS key" in m and "s3:GetObject" not in m for m in said)
    assert proxy.injected["answer"] >= 1


def test_a_disabled_kms_keys_refusal_keeps_its_code(proxy: FaultProxy, run_url: str, inspect_json: Any) -> None:
    body = (
        '<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>KMS.DisabledException</Code>'
        "<Message>arn:aws:kms:us-east-1:123456789012:key/1234abcd is disabled.</Message></Error>"
    )
    proxy.arm(Rule("answer", method="GET", path=r"\.bpk$", status=400, headers={"Content-Type": "application/xml"}, body=body))
    result = inspect_json(run_url)
    assert any("KMS.DisabledException" in f["message"] for f in result.json["findings"]), result.json["findings"]


@pytest.mark.usefixtures("no_retries")
def test_every_store_error_says_its_url_once(moto_bucket: stores.Bucket, run_url: str, proxy: FaultProxy, cli: Any) -> None:
    cases = {
        "no such bucket": ("s3://no-such-bucket-here/run", None, None),
        "cannot reach": (run_url, f"http://127.0.0.1:{stores.free_port()}", None),
        "not an S3 answer": (run_url, None, Rule("answer", status=404, body=HTML)),
        "set AWS_REGION": (run_url, None, Rule("answer", status=301, body=REDIRECT.format(bucket=moto_bucket.name))),
        "no objects under": (moto_bucket.url("nothing-here"), None, None),
    }
    for command in ("inspect", "verify"):
        for expected, (url, endpoint, rule) in cases.items():
            proxy.arm(*([rule] if rule else []))
            session.forget()  # each case its own clients, as each command line has
            line = one_line(cli(command, url, *(["--endpoint-url", endpoint] if endpoint else [])))
            assert expected in line
            bucket_root = "/".join(url.split("/")[:3])
            assert line.count(bucket_root) == 1, line


# --- fixes in a bucket's words -------------------------------------------------------------------


DISK_WORDS = ("ls -l", "chmod", "namei", "dmesg", "smartctl", "readlink", "free space")


def bucket_fixes(result: Any, code: str) -> list[str]:
    found = [f for f in result.json["findings"] if f["code"] == code]
    assert found, result.json["findings"]
    return [fix for finding in found for fix in finding["fixes"]]


def test_an_unreadable_object_gets_a_buckets_fixes(moto_bucket: stores.Bucket, proxy: FaultProxy, run_url: str, inspect_json: Any) -> None:
    denied = '<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>'
    proxy.arm(Rule("answer", method="GET", path=r"model-2\.bpk$", status=403, headers={"Content-Type": "application/xml"}, body=denied))
    fixes = bucket_fixes(inspect_json(run_url), "CKD211")
    assert not [fix for fix in fixes if any(word in fix for word in DISK_WORDS)], fixes
    key = moto_bucket.key("run", "model-2.bpk")
    assert any(f"aws s3api head-object --bucket {moto_bucket.name} --key {key}" in fix for fix in fixes), fixes
    assert any("s3:GetObject" in fix and "kms:Decrypt" in fix for fix in fixes), fixes


def test_a_truncated_object_gets_a_buckets_fixes(moto_bucket: stores.Bucket, tmp_path: Path, inspect_json: Any) -> None:
    write_burn_run(tmp_path / "run", [1, 2])
    cut = tmp_path / "run" / "model-2.bpk"
    cut.write_bytes(cut.read_bytes()[: cut.stat().st_size // 2])
    local = inspect_json(tmp_path / "run")
    assert any("free space" in fix for fix in bucket_fixes(local, "CKD203"))  # on disk: the disk's words
    fixes = bucket_fixes(inspect_json(moto_bucket.upload(tmp_path / "run", "run")), "CKD203")
    assert not [fix for fix in fixes if any(word in fix for word in DISK_WORDS)], fixes
    assert any(f"list-object-versions --bucket {moto_bucket.name}" in fix for fix in fixes), fixes


BAD_ENDPOINTS = ("http://127.0.0.1:99999", "http://127.0.0.1:-1", "http://[::1", "http://exa mple.com", "http://", "notaurl")


@pytest.mark.parametrize("endpoint", BAD_ENDPOINTS)
@pytest.mark.parametrize("given", ["--endpoint-url", "FSSPEC_S3_ENDPOINT_URL", "AWS_ENDPOINT_URL"])
def test_an_endpoint_that_is_no_servers_address_is_one_line_naming_where_it_was_set(
    endpoint: str, given: str, cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    for variable, value in stores.CLEAN_ENV.items():
        monkeypatch.setenv(variable, value)
    session.forget()
    if given == "--endpoint-url":
        result = cli("inspect", "--endpoint-url", endpoint, "s3://ckpt-bucket/run")
    else:
        result = cli("inspect", "s3://ckpt-bucket/run", env={given: endpoint})
    session.forget()
    assert result.exit_code == 2, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and given in result.stderr, result.stderr
