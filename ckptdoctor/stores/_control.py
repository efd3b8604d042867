"""The S3 control plane obstore has no calls for, through boto3 (the ``s3`` extra): listings with
keys no path can name, and later multipart uploads, versions and conditional deletes.

Imported only where a bucket needs it; a missing boto3 is a :class:`StoreError` naming the extra.
Errors are told apart by the HTTP status and the error code S3 sends, never by botocore's classes.
"""

from __future__ import annotations

from typing import Any

from ckptdoctor.stores.session import StoreError
from ckptdoctor.stores.urls import Location, Store

NEEDS_BOTO3 = "pip install 'ckptdoctor[s3]' (boto3)"


def client(location: Location, endpoint: str | None) -> Any:
    """A boto3 S3 client for ``location``'s bucket: boto3's own credential chain and region,
    ``endpoint`` for S3-compatible servers."""
    if location.store is not Store.S3:
        raise StoreError(f"{location.root}: this needs S3's control plane, which {location.store.value}:// has no boto3 client for")
    try:
        import boto3  # the optional extra, loaded only where the control plane is used
        from botocore.config import Config
    except ImportError:
        raise StoreError(f"{location.root}: this needs boto3: {NEEDS_BOTO3}") from None
    config = Config(retries={"max_attempts": 3, "mode": "standard"}, s3={"addressing_style": "path"} if endpoint else None)
    return boto3.session.Session().client("s3", endpoint_url=endpoint, config=config)


def answer(error: BaseException) -> tuple[int | None, str | None]:
    """The HTTP status and S3 error code of a failed boto3 call (None where it never got one)."""
    response = getattr(error, "response", None)
    if not isinstance(response, dict):
        return None, None
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    code = response.get("Error", {}).get("Code")
    return (status if isinstance(status, int) else None), (code if isinstance(code, str) else None)
