"""The fault proxy (tests/faultproxy.py) itself: each fault seen by a real client (boto3, obstore)
through the proxy to moto's S3, per request on keep-alive connections, reproducibly."""

from __future__ import annotations

import contextlib
import io
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import stores
from faultproxy import FaultProxy, Rule, _read_body, recorded, spawn

pytestmark = pytest.mark.slow  # a real S3 server on 127.0.0.1

BUCKET = "ckpt-faultproxy"


def boto3_client(endpoint: str, attempts: int = 1, read_timeout: float = 10) -> Any:
    import boto3
    from botocore.config import Config

    config = Config(retries={"total_max_attempts": attempts, "mode": "standard"}, read_timeout=read_timeout, connect_timeout=5)
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=stores.ACCESS_KEY,
        aws_secret_access_key=stores.SECRET_KEY,
        region_name="us-east-1",
        config=config,
    )


@pytest.fixture
def direct(moto_endpoint: str) -> Any:
    """A client of the server itself, not through the proxy: what really happened."""
    s3 = stores.client(moto_endpoint)
    s3.create_bucket(Bucket=BUCKET)
    return s3


@pytest.fixture
def key() -> str:
    return f"t-{uuid.uuid4().hex[:12]}/object"


@pytest.fixture
def proxy(moto_endpoint: str, direct: Any) -> Iterator[FaultProxy]:
    with FaultProxy(moto_endpoint) as running:
        yield running


def exists(s3: Any, key: str) -> bool:
    return key in [item["Key"] for item in s3.list_objects_v2(Bucket=BUCKET, Prefix=key).get("Contents", [])]


def test_requests_pass_through_unchanged_on_one_kept_alive_connection(proxy: FaultProxy, direct: Any, key: str) -> None:
    s3 = boto3_client(proxy.endpoint)
    s3.put_object(Bucket=BUCKET, Key=key, Body=b"x" * 100_000)  # signed headers untouched: the server accepts it
    assert s3.get_object(Bucket=BUCKET, Key=key)["Body"].read() == b"x" * 100_000
    assert s3.head_object(Bucket=BUCKET, Key=key)["ContentLength"] == 100_000
    assert direct.get_object(Bucket=BUCKET, Key=key)["Body"].read() == b"x" * 100_000
    assert [fault for _, _, fault in proxy.log] == [None, None, None]
    assert proxy.connections == 1
    assert not proxy.injected


def test_drop_acts_on_the_request_and_never_answers(proxy: FaultProxy, direct: Any, key: str) -> None:
    from botocore.exceptions import ConnectionClosedError

    proxy.arm(Rule("drop", method="PUT", path=f"/{key}$", count=1))
    s3 = boto3_client(proxy.endpoint)
    with pytest.raises(ConnectionClosedError):
        s3.put_object(Bucket=BUCKET, Key=key, Body=b"written")
    assert direct.get_object(Bucket=BUCKET, Key=key)["Body"].read() == b"written"  # the ambiguous case: it happened
    s3.put_object(Bucket=BUCKET, Key=key, Body=b"again")  # the count is spent: the next one passes
    assert proxy.injected == {"drop": 1}


@pytest.mark.parametrize(("stage", "written"), [("before", False), ("after", True)])
def test_reset_before_or_after_the_server_saw_the_request(proxy: FaultProxy, direct: Any, key: str, stage: str, written: bool) -> None:
    from botocore.exceptions import ConnectionClosedError, EndpointConnectionError

    proxy.arm(Rule("reset", method="PUT", count=1, stage=stage))
    with pytest.raises((ConnectionClosedError, EndpointConnectionError)) as raised:
        boto3_client(proxy.endpoint).put_object(Bucket=BUCKET, Key=key, Body=b"written")
    assert "reset" in repr(raised.value.__context__ or raised.value).lower() or "reset" in str(raised.value).lower()
    assert exists(direct, key) is written
    assert proxy.injected == {"reset": 1, f"reset-{stage}": 1}


def test_5xx_is_an_s3_error_the_server_never_sees(proxy: FaultProxy, direct: Any, key: str) -> None:
    from botocore.exceptions import ClientError

    direct.put_object(Bucket=BUCKET, Key=key, Body=b"data")
    proxy.arm(Rule("5xx", method="GET", status=503, count=1), Rule("5xx", method="HEAD", status=500, count=1))
    s3 = boto3_client(proxy.endpoint)
    with pytest.raises(ClientError) as slow:
        s3.get_object(Bucket=BUCKET, Key=key)
    assert slow.value.response["Error"]["Code"] == "SlowDown"
    assert slow.value.response["ResponseMetadata"]["HTTPStatusCode"] == 503
    with pytest.raises(ClientError) as internal:
        s3.head_object(Bucket=BUCKET, Key=key)
    assert internal.value.response["ResponseMetadata"]["HTTPStatusCode"] == 500
    assert s3.get_object(Bucket=BUCKET, Key=key)["Body"].read() == b"data"  # same connection, next request passes
    assert proxy.connections == 1
    assert proxy.injected == {"5xx": 2}


def test_obstore_retries_through_5xx_and_resets(proxy: FaultProxy, direct: Any, key: str) -> None:
    import obstore
    from obstore.store import S3Store

    direct.put_object(Bucket=BUCKET, Key=key, Body=b"data")
    proxy.arm(Rule("5xx", method="GET", status=500, count=2), Rule("reset", method="GET", count=1))
    store = S3Store(
        BUCKET,
        config={
            "endpoint": proxy.endpoint,
            "region": "us-east-1",
            "access_key_id": stores.ACCESS_KEY,
            "secret_access_key": stores.SECRET_KEY,
        },
        client_options={"allow_http": True},
        retry_config={
            "max_retries": 5,
            "backoff": {"init_backoff": timedelta(milliseconds=10), "max_backoff": timedelta(milliseconds=50), "base": 2},
            "retry_timeout": timedelta(seconds=10),
        },
    )
    assert bytes(obstore.get(store, key).bytes()) == b"data"
    assert proxy.injected == {"5xx": 2, "reset": 1, "reset-before": 1}
    assert [fault for method, _, fault in proxy.log] == ["5xx", "5xx", "reset", None]


def test_delay_holds_a_request_back(proxy: FaultProxy, direct: Any, key: str) -> None:
    from botocore.exceptions import ReadTimeoutError

    direct.put_object(Bucket=BUCKET, Key=key, Body=b"data")
    proxy.arm(Rule("delay", method="GET", seconds=1.0, count=2))
    started = time.monotonic()
    assert boto3_client(proxy.endpoint).get_object(Bucket=BUCKET, Key=key)["Body"].read() == b"data"
    assert time.monotonic() - started >= 1.0
    with pytest.raises(ReadTimeoutError):
        boto3_client(proxy.endpoint, read_timeout=0.3).get_object(Bucket=BUCKET, Key=key)
    assert proxy.injected == {"delay": 2}


def test_answer_is_any_canned_reply(proxy: FaultProxy) -> None:
    from botocore.exceptions import ClientError

    proxy.arm(Rule("answer", status=404, headers={"Content-Type": "text/html"}, body="<html>Not Found</html>"))
    with pytest.raises(ClientError) as raised:
        boto3_client(proxy.endpoint).list_objects_v2(Bucket=BUCKET)
    assert raised.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404
    assert proxy.injected == {"answer": 1}


def test_a_probability_with_a_seed_picks_the_same_requests_every_time(moto_endpoint: str, direct: Any, key: str) -> None:
    from botocore.exceptions import ClientError

    direct.put_object(Bucket=BUCKET, Key=key, Body=b"data")
    picked = []
    for _ in range(2):
        with FaultProxy(moto_endpoint, [Rule("5xx", method="HEAD", status=500, probability=0.5)], seed=7) as proxy:
            s3 = boto3_client(proxy.endpoint)
            for _ in range(16):
                with contextlib.suppress(ClientError):  # the 5xx answers
                    s3.head_object(Bucket=BUCKET, Key=key)
            picked.append([fault for _, _, fault in proxy.log])
    assert picked[0] == picked[1]
    assert 0 < picked[0].count("5xx") < 16


def test_chunked_bodies_are_framed() -> None:
    stream = io.BytesIO(b"5;ext=1\r\nhello\r\n0\r\nx-trailer: 1\r\n\r\nNEXT")
    assert _read_body(stream, {"transfer-encoding": "chunked"}) == b"5;ext=1\r\nhello\r\n0\r\nx-trailer: 1\r\n\r\n"
    assert stream.read() == b"NEXT"


def test_as_a_process_it_records_what_it_injected(moto_endpoint: str, direct: Any, key: str, tmp_path: Path) -> None:
    from botocore.exceptions import ClientError

    record = tmp_path / "faults.json"
    with spawn(moto_endpoint, [{"fault": "5xx", "method": "PUT", "path": "/lock$", "status": 503, "count": 1}], record) as (endpoint, _):
        s3 = boto3_client(endpoint)
        with pytest.raises(ClientError, match="SlowDown"):
            s3.put_object(Bucket=BUCKET, Key=f"{key}/lock", Body=b"1")
        s3.put_object(Bucket=BUCKET, Key=f"{key}/lock", Body=b"1")
        s3.put_object(Bucket=BUCKET, Key=f"{key}/other", Body=b"1")
        assert recorded(record) == {"5xx": 1}
    assert exists(direct, f"{key}/lock")
