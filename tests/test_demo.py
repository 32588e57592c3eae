"""The newcomer's path: demo data, notebooks in sync and executable, `vinlens demo`."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from vinlens.cli import main
from vinlens.demo.data import ensure_demo_data
from vinlens.demo.launch import lab_command, lab_environment, plain_text
from vinlens.demo.notebooks import (
    NOTEBOOKS,
    TOUR_NOTEBOOK,
    build_notebook,
    notebook_metadata,
    write_notebooks,
)

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("demo")
    ensure_demo_data(root)
    return root


def _without_python_version(metadata: dict) -> dict:
    info = {k: v for k, v in metadata["language_info"].items() if k != "version"}
    return {**metadata, "language_info": info}


def test_committed_notebooks_match_their_source():
    for name, cells in NOTEBOOKS.items():
        committed = nbformat.read(REPO / "notebooks" / name, as_version=4)
        expected = build_notebook(cells)
        stale = f"notebooks/{name} is stale: run `python -m vinlens.demo.notebooks notebooks`"
        assert [c.source for c in committed.cells] == [c.source for c in expected.cells], stale
        assert [c.get("id") for c in committed.cells] == [c.id for c in expected.cells], stale
        assert (committed.nbformat, committed.nbformat_minor) == (
            nbformat.v4.nbformat,
            nbformat.v4.nbformat_minor,
        ), stale
        assert _without_python_version(committed.metadata) == _without_python_version(
            expected.metadata
        ), stale
        # Nothing a reader's kernel would replace or the server would refuse to trust.
        for cell in committed.cells:
            if cell.cell_type == "code":
                assert cell.outputs == [] and cell.execution_count is None, stale
            assert cell.metadata == {}, stale


def test_notebook_metadata_is_what_the_kernel_reports():
    from ipykernel.ipkernel import IPythonKernel
    from jupyter_client.kernelspec import KernelSpecManager

    metadata = notebook_metadata()
    assert metadata["language_info"] == IPythonKernel.language_info
    spec = KernelSpecManager().get_kernel_spec("python3")
    assert metadata["kernelspec"] == {
        "display_name": spec.display_name,
        "language": spec.language,
        "name": "python3",
    }


def test_written_notebooks_are_trusted_unless_edited(tmp_path: Path, monkeypatch):
    from nbformat.sign import NotebookNotary

    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "jupyter-data"))

    def trusted(path: Path) -> bool:
        notary = NotebookNotary()
        try:
            return bool(notary.check_signature(nbformat.read(path, as_version=4)))
        finally:
            notary.store.close()

    out = tmp_path / "nbs"
    write_notebooks(out)
    assert not trusted(out / TOUR_NOTEBOOK)
    edited = out / "01_model_inspection.ipynb"
    nb = nbformat.read(edited, as_version=4)
    nb.cells[0].source += "\nmy note"
    nbformat.write(nb, str(edited))
    write_notebooks(out, overwrite=False, trust=True)
    assert trusted(out / TOUR_NOTEBOOK)
    assert not trusted(edited)  # the user's edits are theirs to trust


def test_demo_data_is_made_once_and_reused(demo_dir: Path):
    data = ensure_demo_data(demo_dir)
    manifest = data.store_dir / "manifest.json"
    before = manifest.stat().st_mtime_ns
    again = ensure_demo_data(demo_dir)
    assert again.store == data.store
    assert manifest.stat().st_mtime_ns == before  # not regenerated
    assert sorted(p.suffix for p in data.raw_dir.rglob("*.tar"))  # raw shards exist


def test_write_notebooks_keeps_user_edits(tmp_path: Path):
    write_notebooks(tmp_path)
    tour = tmp_path / TOUR_NOTEBOOK
    tour.write_text(tour.read_text().replace("vinlens tour", "my edited tour"))
    assert write_notebooks(tmp_path, overwrite=False) == []
    assert "my edited tour" in tour.read_text()


@pytest.mark.parametrize("name", [n for n in NOTEBOOKS if n != TOUR_NOTEBOOK])
def test_area_notebooks_execute(
    name: str, demo_dir: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
):
    monkeypatch.setenv("VINLENS_DEMO_DIR", str(demo_dir))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = nbformat.read(REPO / "notebooks" / name, as_version=4)
    NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    errors = [
        o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"
    ]
    assert errors == []


def test_vinlens_demo_check_runs_the_tour(demo_dir: Path, capsys: pytest.CaptureFixture[str]):
    assert main(["demo", "--dir", str(demo_dir), "--check"]) == 0
    assert "code cells ran" in capsys.readouterr().out
    assert (demo_dir / TOUR_NOTEBOOK).exists()
    assert not (demo_dir / "snapshots.csv").exists()  # the tour's export went to a temp dir


def test_vinlens_demo_check_fails_when_a_cell_fails(demo_dir: Path, tmp_path: Path):
    broken = tmp_path / "broken"
    broken.mkdir()
    write_notebooks(broken)
    tour = broken / TOUR_NOTEBOOK
    nb = nbformat.read(tour, as_version=4)
    nb.cells.insert(0, nbformat.v4.new_code_cell("raise RuntimeError('planted failure')"))
    nbformat.write(nb, str(tour))
    (broken / "data").symlink_to(demo_dir / "data")  # so preparing the demo makes nothing
    assert main(["demo", "--dir", str(broken), "--check"]) == 1


def test_check_errors_are_plain_text_without_terminal_colours(
    demo_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    assert plain_text("\x1b[0;31mValueError\x1b[0m: x\x1b[1;32m y\x1b[K") == "ValueError: x y"
    broken = tmp_path / "colours"
    broken.mkdir()
    write_notebooks(broken)
    tour = broken / TOUR_NOTEBOOK
    nb = nbformat.read(tour, as_version=4)
    # A coloured traceback, as an IPython kernel with colours on sends it.
    nb.cells.insert(0, nbformat.v4.new_code_cell("%colors linux\nraise RuntimeError('planted')"))
    nbformat.write(nb, str(tour))
    (broken / "data").symlink_to(demo_dir / "data")
    assert main(["demo", "--dir", str(broken), "--check"]) == 1
    err = capsys.readouterr().err
    assert "RuntimeError" in err and "planted" in err
    assert "\x1b" not in err, err


def test_lab_keeps_websocket_settings_tornado_accepts():
    """jupyter_server's default ping timeout (90 s) exceeds its interval (30 s), which tornado
    warns about on every kernel connection; the demo turns the pings off."""
    from jupyter_server.base.websocket import WebSocketMixin
    from jupyter_server.serverapp import ServerApp

    cmd = lab_command(Path("/srv/demo"), port=8888, open_browser=False)
    app = ServerApp()
    app.parse_command_line([a for a in cmd[3:] if a.startswith("--ServerApp.tornado_settings")])

    class Handler(WebSocketMixin):
        settings = app.tornado_settings

    interval, timeout = Handler().ping_interval, Handler().ping_timeout
    # tornado's own rule (WebSocketProtocol13.ping_timeout): no interval, or timeout <= it.
    assert not interval or timeout <= interval, (interval, timeout)


def test_lab_gets_its_token_from_the_environment_not_argv():
    cmd = lab_command(Path("/srv/demo"), port=8888, open_browser=False)
    assert not any("token" in arg.lower() for arg in cmd)
    assert "--ServerApp.ip=127.0.0.1" in cmd
    env = lab_environment("s3cret", {"PATH": "/bin", "JUPYTER_TOKEN_FILE": "/tmp/t"})
    assert env == {"PATH": "/bin", "JUPYTER_TOKEN": "s3cret"}


def test_vinlens_demo_serves_lab_on_loopback_with_a_token(demo_dir: Path, tmp_path: Path):
    env = dict(
        os.environ,
        JUPYTER_CONFIG_DIR=str(tmp_path / "cfg"),
        JUPYTER_DATA_DIR=str(tmp_path / "data"),
        JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"),
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "vinlens.cli", "demo", "--dir", str(demo_dir), "--no-browser"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    try:
        url = None
        deadline = time.monotonic() + 120
        assert proc.stdout is not None
        while url is None and time.monotonic() < deadline:
            line = proc.stdout.readline()
            match = re.search(r"(http://127\.0\.0\.1:\d+)/lab/tree/tour\.ipynb\?token=(\S+)", line)
            if match:
                url = match.groups()
        assert url, "vinlens demo printed no URL with a token"
        base, token = url
        rest: list[str] = []
        reader = threading.Thread(target=lambda: rest.extend(proc.stdout or ()), daemon=True)
        reader.start()
        for _ in range(600):
            try:
                with urllib.request.urlopen(
                    f"{base}/api/contents/{TOUR_NOTEBOOK}?token={token}", timeout=2
                ) as r:
                    assert r.status == 200
                    break
            except urllib.error.HTTPError:
                raise
            except OSError:
                time.sleep(0.2)
        else:
            pytest.fail("JupyterLab did not come up")
        with pytest.raises(urllib.error.HTTPError) as denied:
            urllib.request.urlopen(f"{base}/api/contents/{TOUR_NOTEBOOK}", timeout=5)
        assert denied.value.code == 403  # auth stays on: no token, no notebook
        # `vinlens demo` became JupyterLab itself, so stopping it leaves no server behind.
        cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes()
        assert b"jupyterlab" in cmdline.split(b"\0")
        # The token is not on the command line, which every local user can read with `ps`;
        # it is in the environment, which only the owner can read.
        assert token.encode() not in cmdline
        environ = Path(f"/proc/{proc.pid}/environ")
        assert f"JUPYTER_TOKEN={token}".encode() in environ.read_bytes().split(b"\0")
        assert environ.stat().st_mode & 0o077 == 0
        # Loading the page runs Lab's own checks (node helpers among them): nothing fails.
        with urllib.request.urlopen(
            f"{base}/lab/tree/{TOUR_NOTEBOOK}?token={token}", timeout=60
        ) as r:
            assert r.status == 200
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
    reader.join(10)
    problems = [line for line in rest if re.search(r"Traceback|Error\b|\[E ", line)]
    assert problems == [], "".join(rest)
