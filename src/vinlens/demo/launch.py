"""``vinlens demo``: make the demo data and notebooks, then open them in JupyterLab.

JupyterLab is bound to loopback and keeps its normal token authentication: the token is
generated here so the printed URL works with ``--no-browser`` too. It reaches JupyterLab
through the ``JUPYTER_TOKEN`` environment variable, never its command line: any local
user can read a process's arguments (``ps``), only its owner can read its environment.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import socket
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import NoReturn

from vinlens.demo.data import DemoData, ensure_demo_data
from vinlens.demo.notebooks import TOUR_NOTEBOOK, write_notebooks

__all__ = [
    "LAB_TORNADO_SETTINGS",
    "check_notebook",
    "lab_command",
    "lab_environment",
    "plain_text",
    "prepare_demo",
    "run_lab",
]

LAB_TORNADO_SETTINGS: dict[str, int] = {"ws_ping_interval": 0}
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")


def prepare_demo(root: str | os.PathLike[str] | None = None) -> DemoData:
    """Demo data plus the notebooks (written only where missing, so edits are kept).

    Unedited notebooks are signed so JupyterLab opens them trusted.
    """
    data = ensure_demo_data(root)
    write_notebooks(data.root, overwrite=False, trust=True)
    return data


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def lab_command(root: Path, *, port: int, open_browser: bool) -> list[str]:
    """JupyterLab's argv for the demo; it holds no secret (see :func:`lab_environment`)."""
    cmd = [
        sys.executable,
        "-m",
        "jupyterlab",
        f"--ServerApp.root_dir={root}",
        "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        f"--ServerApp.open_browser={open_browser}",
        f"--LabApp.default_url=/lab/tree/{TOUR_NOTEBOOK}",
        # jupyter_server's websocket keep-alive defaults to a 30 s ping with a 90 s timeout,
        # which tornado >= 6.5 refuses ("websocket_ping_timeout (90000) cannot be longer
        # than the websocket_ping_interval (30000)") on every kernel connection; a timeout
        # equal to the interval would make jupyter_server close sockets whose pong came a
        # little late. On loopback no proxy drops idle sockets, so the demo sends no pings.
        f"--ServerApp.tornado_settings={json.dumps(LAB_TORNADO_SETTINGS)}",
    ]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")  # containers often run as root; auth stays on
    return cmd


def lab_environment(token: str, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """``base`` (default: this process's environment) with ``JUPYTER_TOKEN`` set to ``token``."""
    env = dict(os.environ if base is None else base)
    env.pop("JUPYTER_TOKEN_FILE", None)  # JUPYTER_TOKEN wins anyway; leave one source
    env["JUPYTER_TOKEN"] = token
    return env


def run_lab(data: DemoData, *, port: int | None = None, open_browser: bool = True) -> NoReturn:
    """Replace this process by JupyterLab serving the demo (so signals reach Lab directly)."""
    port = port or _free_port()
    token = secrets.token_urlsafe(24)
    url = f"http://127.0.0.1:{port}/lab/tree/{TOUR_NOTEBOOK}?token={token}"
    cmd = lab_command(data.root, port=port, open_browser=open_browser)
    print(f"vinlens demo: store {data.store_dir}")
    print(f"vinlens demo: raw shards {data.raw_dir}")
    print(f"vinlens demo: notebooks in {data.root}")
    print(f"vinlens demo: starting JupyterLab; open\n\n    {url}\n", flush=True)
    sys.stderr.flush()
    os.execve(cmd[0], cmd, lab_environment(token))


def plain_text(text: str) -> str:
    """``text`` without ANSI escape sequences (colours, cursor moves)."""
    return _ANSI.sub("", text)


def check_notebook(path: Path, *, timeout: int = 600) -> int:
    """Run a notebook headless (nbclient); 0 when every cell ran, 1 otherwise.

    The notebook file is only read, and the kernel works in a temporary directory, so a
    check leaves neither outputs in the notebook nor files (e.g. exported CSVs) behind.
    """
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    nb = nbformat.read(path, as_version=4)  # type: ignore[no-untyped-call]
    with tempfile.TemporaryDirectory(prefix="vinlens-check-") as tmp:
        client = NotebookClient(
            nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": tmp}}
        )
        started = time.perf_counter()
        try:
            client.execute()
        except CellExecutionError as exc:
            # Tracebacks from the kernel carry terminal colour codes; a log or CI page shows
            # them as garbage.
            print(
                f"vinlens demo --check: {path.name} failed:\n{plain_text(str(exc))}",
                file=sys.stderr,
            )
            return 1
    cells = sum(1 for c in nb.cells if c.cell_type == "code")
    print(
        f"vinlens demo --check: {path.name}: {cells} code cells ran in {time.perf_counter() - started:.1f}s"
    )
    return 0
