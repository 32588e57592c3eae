"""Fixtures every test folder uses: moto's S3 server (the store's and the run log's tests on
object storage). ``tests/store`` and ``tests/health`` are on ``sys.path`` (pyproject's
``pythonpath``) for their shared helpers (``s3_server``, ``health_models``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from s3_server import S3Server, s3_filesystem

_FAKE_AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "vinlens-test",
    "AWS_SECRET_ACCESS_KEY": "vinlens-test",
    "AWS_SESSION_TOKEN": "vinlens-test",
    "AWS_DEFAULT_REGION": "us-east-1",
    # No credential lookups on the network (instance metadata) from tests.
    "AWS_EC2_METADATA_DISABLED": "true",
}


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """moto's S3 server on 127.0.0.1 (a free port), with fake credentials in the environment.

    The credentials exist only while this fixture is active (restored at session end); the
    endpoint reaches fsspec through ``storage_options["client_kwargs"]``, as users pass it.
    """
    from moto.server import ThreadedMotoServer

    # werkzeug logs every request at INFO; tests that count requests add their own handler.
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    with pytest.MonkeyPatch.context() as patch:
        for key, value in _FAKE_AWS_ENV.items():
            patch.setenv(key, value)
        server.start()
        try:
            host, port = server.get_host_and_port()
            record = S3Server(endpoint_url=f"http://{host}:{port}", bucket="vinlens-test")
            s3_filesystem(record).mkdir(record.bucket)
            yield record
        finally:
            server.stop()
