"""A loopback HTTP/1.1 proxy in front of an S3 server that breaks chosen requests as networks do.

Tests point a client (obstore, boto3, the ckptdoctor CLI) at the proxy's endpoint; the proxy
forwards each request to the real server (SeaweedFS or moto, tests/stores.py) unless a rule
picks it for a fault:

``drop``
    the request is forwarded and acted on, the answer read, and the client's connection closed
    without it: the ambiguous case, where a client cannot tell whether its write happened.
``reset``
    the client's connection closed with a TCP RST (``SO_LINGER`` 0), ``before`` the request is
    forwarded (the server never sees it) or ``after`` (it was acted on).
``5xx``
    an S3 error answered by the proxy itself, never forwarded: 500 ``InternalError`` or 503
    ``SlowDown`` (the XML body S3 sends).
``delay``
    ``seconds`` of sleep, then the request forwarded.
``answer``
    a canned answer, never forwarded: any ``status``, ``headers`` and ``body`` (for answers no
    test server gives: an HTML 404 from a web server, S3's 301 to a bucket's region).

Faults apply per request, not per connection: requests and answers are framed (Content-Length,
chunked, HEAD), so keep-alive connections carry good and broken requests alike. A rule matches
on the method and regular expressions searched in the request's path and query; it
applies to the next ``count`` matching requests, or to each with ``probability`` drawn from a
``random.Random(seed)``, so a test is reproducible. What was injected is counted by kind
(``injected``) and logged per request (``log``).

In the test process: ``with FaultProxy(endpoint, [Rule("drop", method="PUT", path="/lock$",
count=1)]) as proxy: ... proxy.endpoint ...`` (a thread; obstore and boto3 release the GIL).
As a process, for CLI runs and SIGKILL tests: ``python tests/faultproxy.py --target URL --port N
--rules JSON [--seed S] [--record FILE]`` prints its port on a line once it listens, and
rewrites FILE (JSON: injected, requests) after every request; :func:`spawn` runs it.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import random
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

FAULTS = ("drop", "reset", "5xx", "delay", "answer")
_S3_ERRORS = {
    500: ("InternalError", "We encountered an internal error. Please try again."),
    503: ("SlowDown", "Please reduce your request rate."),
}


@dataclass
class Request:
    method: str
    target: str
    headers: dict[str, str]
    """Lower-cased names; a repeated header keeps its last value."""
    raw: bytes
    """The request as it is forwarded: head and body, framing untouched."""

    @property
    def path(self) -> str:
        return self.target.partition("?")[0]

    @property
    def query(self) -> str:
        return self.target.partition("?")[2]


@dataclass
class Rule:
    """One fault, and which requests get it. ``method`` (None: any), ``path`` (a regular
    expression searched in the request's path; None: any) and ``query`` (one searched in its query
    string: ``uploads``, ``list-type=2``; botocore adds ``x-id=PutObject``) pick the requests,
    ``when`` (a function of the :class:`Request`) too where given; of those, the next ``count``
    (None: every one) get the fault, each with ``probability``."""

    fault: str
    method: str | None = None
    path: str | None = None
    query: str | None = None
    count: int | None = None
    probability: float = 1.0
    seconds: float = 0.0
    """``delay``'s sleep."""
    status: int = 503
    """``5xx``'s and ``answer``'s status."""
    stage: str = "before"
    """``reset``: ``before`` forwarding (the server never sees the request) or ``after``."""
    headers: dict[str, str] = field(default_factory=dict)
    body: str = ""
    """``answer``'s headers and body."""
    when: Callable[[Request], bool] | None = None

    def __post_init__(self) -> None:
        if self.fault not in FAULTS:
            raise ValueError(f"{self.fault!r} is not a fault ({', '.join(FAULTS)})")
        if self.fault == "5xx" and self.status not in _S3_ERRORS:
            raise ValueError(f"5xx answers {sorted(_S3_ERRORS)}, not {self.status}")
        if self.stage not in ("before", "after"):
            raise ValueError(f"stage is before or after, not {self.stage!r}")

    def matches(self, request: Request) -> bool:
        if self.count is not None and self.count <= 0:
            return False
        if self.method is not None and request.method != self.method.upper():
            return False
        if self.path is not None and not re.search(self.path, request.path):
            return False
        if self.query is not None and not re.search(self.query, request.query):
            return False
        return self.when is None or self.when(request)

    @classmethod
    def from_json(cls, item: dict[str, Any]) -> Rule:
        return cls(**item)


class FaultProxy:
    """The proxy: ``endpoint`` is its URL; ``rules`` may be changed while it runs (``arm``)."""

    def __init__(self, target: str, rules: Sequence[Rule] = (), seed: int = 0, port: int = 0, record: Path | None = None) -> None:
        host_port = target.split("://", 1)[-1].split("/", 1)[0]
        host, _, port_text = host_port.rpartition(":")
        self.upstream = (host or host_port, int(port_text) if host else 80)
        self.rules = list(rules)
        self.injected: collections.Counter[str] = collections.Counter()
        """Faults injected, by kind (``reset`` also as ``reset-before``/``reset-after``)."""
        self.log: list[tuple[str, str, str | None]] = []
        """Every request: method, target, the fault it got (None: forwarded as it was)."""
        self.requests: list[Request] = []
        """Every request whole (its headers: who sent it, for which region it was signed)."""
        self._random = random.Random(seed)
        self._lock = threading.Lock()
        self._record = record
        self._listener = socket.create_server(("127.0.0.1", port))
        self.port: int = self._listener.getsockname()[1]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._open: set[socket.socket] = set()
        self.connections = 0
        """Client connections accepted (keep-alive: fewer than requests)."""
        self._thread = threading.Thread(target=self._accept, daemon=True, name="faultproxy")

    def __enter__(self) -> FaultProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def arm(self, *rules: Rule) -> None:
        """Replace the rules (a test sets up through the proxy first, then breaks what it tests)."""
        with self._lock:
            self.rules = list(rules)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        with self._lock:
            for connection in list(self._open):
                with contextlib.suppress(OSError):
                    connection.shutdown(socket.SHUT_RDWR)
        self._thread.join(timeout=5)

    def serve_forever(self) -> None:
        self._accept()

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self._listener.accept()
            except OSError:  # closed
                return
            with self._lock:
                self._open.add(connection)
                self.connections += 1
            threading.Thread(target=self._serve, args=(connection,), daemon=True).start()

    def _choose(self, request: Request) -> Rule | None:
        with self._lock:
            chosen = None
            for rule in self.rules:
                if rule.matches(request) and (rule.probability >= 1 or self._random.random() < rule.probability):
                    chosen = rule
                    if rule.count is not None:
                        rule.count -= 1
                    self.injected[rule.fault] += 1
                    if rule.fault == "reset":
                        self.injected[f"reset-{rule.stage}"] += 1
                    break
            self.log.append((request.method, request.target, chosen.fault if chosen else None))
            self.requests.append(request)
            if self._record is not None:
                scratch = self._record.with_name(f".{self._record.name}.{uuid.uuid4().hex[:8]}")
                scratch.write_text(json.dumps({"injected": dict(self.injected), "requests": len(self.log)}))
                os.replace(scratch, self._record)
            return chosen

    def _serve(self, client: socket.socket) -> None:
        reader = client.makefile("rb")
        upstream: tuple[socket.socket, BinaryIO] | None = None
        try:
            while True:
                request = _read_request(reader, client)
                if request is None:
                    return
                rule = self._choose(request)
                fault = rule.fault if rule else None
                if rule is not None and fault in ("5xx", "answer"):
                    client.sendall(_canned(rule, request))
                    if _closes(request.headers):
                        return
                    continue
                if rule is not None and fault == "reset" and rule.stage == "before":
                    _reset(client)
                    return
                if rule is not None and fault == "delay":
                    time.sleep(rule.seconds)
                if upstream is None:
                    server = socket.create_connection(self.upstream)
                    upstream = (server, server.makefile("rb"))
                upstream[0].sendall(request.raw)
                answer, keep = _read_response(upstream[1], request.method)
                if not keep:
                    _shut(*upstream)
                    upstream = None
                if fault == "drop":
                    return  # the answer is never sent; the connection closes below
                if fault == "reset":
                    _reset(client)
                    return
                client.sendall(answer)
                if _closes(request.headers):
                    return
        except OSError:
            return
        finally:
            with self._lock:
                self._open.discard(client)
            if upstream is not None:
                _shut(*upstream)
            _shut(client, reader)


def _shut(connection: socket.socket, reader: BinaryIO) -> None:
    with contextlib.suppress(OSError):
        reader.close()
        connection.close()


def _reset(connection: socket.socket) -> None:
    """Close with a TCP RST: SO_LINGER on with a zero timeout discards what is unsent."""
    with contextlib.suppress(OSError):
        connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


def _closes(headers: dict[str, str]) -> bool:
    return headers.get("connection", "").lower() == "close"


def _read_head(reader: BinaryIO) -> tuple[list[bytes], dict[str, str]] | None:
    """The start line and header lines (without their line ends) and the headers by name; None
    at the end of the stream before any byte."""
    lines: list[bytes] = []
    while True:
        line = reader.readline(65536)
        if not line:
            if lines:
                raise OSError("the stream ended inside a message's head")
            return None
        if line in (b"\r\n", b"\n"):
            if not lines:
                continue  # a stray line end between messages
            break
        lines.append(line.rstrip(b"\r\n"))
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    return lines, headers


def _read_body(reader: BinaryIO, headers: dict[str, str]) -> bytes:
    """A message's body as framed by its headers (chunked or Content-Length), bytes as sent."""
    if "chunked" in headers.get("transfer-encoding", "").lower():
        body = b""
        while True:
            size_line = reader.readline(65536)
            body += size_line
            size = int(size_line.split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while True:  # trailers, up to the empty line
                    line = reader.readline(65536)
                    body += line
                    if line in (b"\r\n", b"\n", b""):
                        return body
            body += _exactly(reader, size + 2)
    return _exactly(reader, int(headers.get("content-length", "0") or 0))


def _exactly(reader: BinaryIO, size: int) -> bytes:
    data = reader.read(size) if size else b""
    if len(data) != size:
        raise OSError("the stream ended inside a message's body")
    return data


def _read_request(reader: BinaryIO, client: socket.socket) -> Request | None:
    head = _read_head(reader)
    if head is None:
        return None
    lines, headers = head
    method, target, _ = lines[0].decode("latin-1").split(" ", 2)
    if headers.get("expect", "").lower() == "100-continue":
        # answered here, and the header not forwarded (SigV4 does not sign it): the body
        # is read at once, where a client waiting for the server's 100 would wait a second
        client.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
        lines = [line for line in lines if not line.lower().startswith(b"expect:")]
        del headers["expect"]
    body = _read_body(reader, headers)
    raw = b"\r\n".join(lines) + b"\r\n\r\n" + body
    return Request(method.upper(), target, headers, raw)


def _read_response(reader: BinaryIO, method: str) -> tuple[bytes, bool]:
    """The server's answer to a ``method`` request, as the client is sent it; and whether the
    server's connection stays open. ``Connection`` is hop-by-hop: the server's (werkzeug closes
    after every answer) is left out, so the client's connection stays open whatever the server
    does with its own, and an answer framed by the server's close gets a Content-Length."""
    while True:
        head = _read_head(reader)
        if head is None:
            raise OSError("the server closed the connection without answering")
        lines, headers = head
        status = int(lines[0].split(b" ")[1])
        if status != 100:
            break
    kept = [line for line in lines if not line.lower().startswith(b"connection:")]
    keep = not _closes(headers)
    if method == "HEAD" or status in (204, 304) or status < 200:
        body = b""
    elif "transfer-encoding" in headers or "content-length" in headers:
        body = _read_body(reader, headers)
    else:
        body, keep = reader.read(), False
        kept.append(f"Content-Length: {len(body)}".encode())
    return b"\r\n".join(kept) + b"\r\n\r\n" + body, keep


def _canned(rule: Rule, request: Request) -> bytes:
    """The proxy's own answer for a ``5xx`` or ``answer`` rule."""
    if rule.fault == "5xx":
        code, message = _S3_ERRORS[rule.status]
        body = (
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            f"<Error><Code>{code}</Code><Message>{message}</Message><RequestId>FAULTPROXY</RequestId></Error>"
        ).encode()
        headers = {"Content-Type": "application/xml"}
        reason = {500: "Internal Server Error", 503: "Service Unavailable"}[rule.status]
    else:
        body, headers, reason = rule.body.encode(), rule.headers, "Fault Proxy"
    lines = [f"HTTP/1.1 {rule.status} {reason}", *(f"{name}: {value}" for name, value in headers.items())]
    lines.append(f"Content-Length: {len(body)}")
    if _closes(request.headers):
        lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (b"" if request.method == "HEAD" else body)


@contextlib.contextmanager
def spawn(target: str, rules: Sequence[dict[str, Any]], record: Path, seed: int = 0) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """The proxy as a process of its own (it outlives a SIGKILLed client); its endpoint and the
    process. ``record`` is rewritten after every request (:func:`recorded` reads it)."""
    command = [sys.executable, __file__, "--target", target, "--port", "0", "--rules", json.dumps(list(rules))]
    command += ["--seed", str(seed), "--record", str(record)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        port = process.stdout.readline().strip()
        if not port:
            raise RuntimeError(f"the fault proxy did not start (exit {process.wait()})")
        yield f"http://127.0.0.1:{port}", process
    finally:
        process.terminate()
        process.wait(timeout=10)


def recorded(record: Path) -> collections.Counter[str]:
    """The faults a :func:`spawn`ed proxy injected so far, by kind."""
    if not record.exists():
        return collections.Counter()
    return collections.Counter(json.loads(record.read_text())["injected"])


def main(arguments: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--target", required=True, help="the S3 server's URL (http://127.0.0.1:PORT)")
    parser.add_argument("--port", type=int, default=0, help="where to listen on 127.0.0.1 (0: a free port, printed)")
    parser.add_argument("--rules", default="[]", help="a JSON list of rules (Rule's fields, without `when`)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--record", type=Path, help="a JSON file rewritten after every request: faults injected, requests seen")
    options = parser.parse_args(arguments)
    rules = [Rule.from_json(item) for item in json.loads(options.rules)]
    proxy = FaultProxy(options.target, rules, seed=options.seed, port=options.port, record=options.record)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print(proxy.port, flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        proxy.serve_forever()


if __name__ == "__main__":
    main()
