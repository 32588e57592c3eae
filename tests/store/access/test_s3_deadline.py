"""A total deadline on every S3 request (issue 23, class 2): an endpoint that trickles.

botocore's connect and read timeouts bound each socket wait, so a server that sends one
byte every 2 s never trips them and one request could run for ever. The server here
(127.0.0.1, a free port) answers every request that way; it stops by itself after
``LIFETIME`` seconds and when the test ends.
"""

from __future__ import annotations

import socketserver
import threading
import time
from collections.abc import Iterator

import pytest

from vinlens.store.access import FsspecStoreAccess, StoreAccessError, open_store_access
from vinlens.store.access import _fsspec as access_remote
from vinlens.store.format import VinOfflineStoreConfig
from vinlens.store.reader import VinOfflineStoreReader

pytestmark = pytest.mark.timeout(120)

BYTE_EVERY_S = 2.0
LIFETIME_S = 60.0
DEADLINE_S = 4.0
_RESPONSE = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/xml\r\nContent-Length: 4096\r\n"
    b"x-amz-request-id: trickle\r\n\r\n" + b"<" * 4096
)


class _Trickle(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _TrickleHandler)
        self.stop = threading.Event()
        self.started = time.monotonic()
        self.requests = 0


class _TrickleHandler(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        server = self.server
        assert isinstance(server, _Trickle)
        self.request.settimeout(1.0)
        try:
            self.request.recv(65536)  # the request line and headers
        except OSError:
            return
        server.requests += 1
        for i in range(len(_RESPONSE)):
            if server.stop.is_set() or time.monotonic() - server.started > LIFETIME_S:
                return
            try:
                self.request.sendall(_RESPONSE[i : i + 1])
            except OSError:
                return  # the client gave up: what the deadline is for
            server.stop.wait(BYTE_EVERY_S)


@pytest.fixture
def trickle(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Trickle]:
    for key, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
    }.items():
        monkeypatch.setenv(key, value)
    server = _Trickle()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2})
    thread.daemon = True
    thread.start()
    try:
        yield server
    finally:
        server.stop.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def _options(server: _Trickle) -> dict[str, object]:
    host, port = server.server_address[:2]
    # skip_instance_cache: a fresh client per test, never one bound to another endpoint.
    return {"client_kwargs": {"endpoint_url": f"http://{host}:{port}"}, "skip_instance_cache": True}


def _warm(access: FsspecStoreAccess) -> None:
    """Build the S3 client before the clock starts (seconds on a loaded machine)."""
    from fsspec.asyn import sync

    sync(access.filesystem.loop, access.filesystem.set_session)


def test_a_trickling_endpoint_ends_in_an_error_within_the_deadline(trickle: _Trickle) -> None:
    access = open_store_access("s3://bucket/store", _options(trickle))
    assert isinstance(access, FsspecStoreAccess)
    access.request_deadline = DEADLINE_S
    _warm(access)
    started = time.monotonic()
    with pytest.raises(StoreAccessError, match=r"within 4 s, the total deadline of one request"):
        access.read_bytes("manifest.json")
    elapsed = time.monotonic() - started
    assert trickle.requests >= 1  # the request reached the server and was being trickled
    # Well under one read timeout's worth of trickling, far from "for ever".
    assert DEADLINE_S - 0.5 <= elapsed < DEADLINE_S + 3, elapsed


def test_opening_a_store_on_a_trickling_endpoint_is_bounded(
    trickle: _Trickle, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(access_remote, "REQUEST_DEADLINE_S", DEADLINE_S)
    config = VinOfflineStoreConfig(store_dir="s3://bucket/store", storage_options=_options(trickle))
    started = time.monotonic()
    with pytest.raises(StoreAccessError, match="total deadline"):
        VinOfflineStoreReader(config)
    # Session set-up counts too; the bound is the deadline per request, not minutes.
    assert time.monotonic() - started < 3 * DEADLINE_S + 10


def test_the_default_deadline_is_the_documented_worst_case() -> None:
    assert access_remote.REQUEST_DEADLINE_S == 45.0
    access = FsspecStoreAccess("memory://deadline-check")
    assert access.request_deadline == access_remote.REQUEST_DEADLINE_S
