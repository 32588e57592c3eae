"""End-to-end fixtures: an isolated JupyterLab on loopback driven by Debian's Chromium.

Adapted from the proven recipe in ../shared/recipes/jupyterlab-e2e. One Lab server and one
browser per test session; each test gets a fresh page. Screenshots go to ``artifacts/e2e``
(or ``$VINLENS_ARTIFACTS``). Every test in this folder is marked ``e2e``.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

CHROMIUM = os.environ.get("E2E_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage",
]  # fmt: skip
CONFIG = Path(__file__).resolve().parent / "jupyter_server_test_config.py"
REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(os.environ.get("VINLENS_ARTIFACTS", REPO / "artifacts")) / "e2e"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.e2e)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def lab_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} not found: install Debian's chromium (scripts/setup.sh does)")
    w = tmp_path_factory.mktemp("lab")
    for d in (
        "root",
        "ws",
        "cfg",
        "data",
        "runtime",
        "tmp",
        "settings/@jupyterlab/apputils-extension",
    ):
        (w / d).mkdir(parents=True, exist_ok=True)
    (w / "settings/@jupyterlab/apputils-extension/notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false", "checkForUpdates": False})
    )
    port = _free_port()
    env = dict(
        os.environ,
        E2E_PORT=str(port),
        E2E_ROOT=str(w / "root"),
        E2E_WORKSPACES=str(w / "ws"),
        E2E_SETTINGS=str(w / "settings"),
        JUPYTER_CONFIG_DIR=str(w / "cfg"),
        JUPYTER_DATA_DIR=str(w / "data"),
        JUPYTER_RUNTIME_DIR=str(w / "runtime"),
        JUPYTER_PLATFORM_DIRS="1",
        TMPDIR=str(w / "tmp"),
        MPLBACKEND="Agg",
        VINLENS_DEMO_DIR=str(w / "demo"),  # kernels make the tour's demo data here
    )
    log = open(w / "lab.log", "w")  # noqa: SIM115 - closed in finally
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", f"--config={CONFIG}"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(900):
            if proc.poll() is not None:
                raise RuntimeError(f"jupyter lab exited: {(w / 'lab.log').read_text()}")
            try:
                urllib.request.urlopen(url + "/api/status", timeout=1)
                break
            except OSError:
                time.sleep(0.1)
        else:
            raise RuntimeError("jupyter lab did not start within 90 s")
        yield {
            "url": url,
            "root": w / "root",
            "log": w / "lab.log",
            "pid": proc.pid,
            "demo_dir": w / "demo",
        }
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


@pytest.fixture(scope="session")
def browser_ctx() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        udd = tempfile.mkdtemp(prefix="chromium-udd-")
        ctx = p.chromium.launch_persistent_context(
            udd,
            executable_path=CHROMIUM,
            headless=True,
            args=CHROMIUM_ARGS,
            viewport={"width": 1400, "height": 1000},
            accept_downloads=True,
        )
        ctx.set_default_timeout(60_000)
        yield ctx
        ctx.close()


class Lab:
    """A JupyterLab page with ``window.jupyterapp`` exposed, plus notebook helpers."""

    def __init__(self, page: Any, server: dict[str, Any]) -> None:
        self.page = page
        self.server = server
        self.errors: list[str] = []
        self.warnings: list[str] = []  # console warnings (anywidget deprecations among them)

    def write_notebook(self, name: str, cells: Sequence[str]) -> str:
        nb = new_notebook(
            metadata={
                "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}
            }
        )
        nb.cells = [new_code_cell(src) for src in cells]
        nbformat.write(nb, str(self.server["root"] / name))
        return name

    def open(self, nb: str) -> None:
        self.page.goto(f"{self.server['url']}/lab/tree/{nb}?reset", wait_until="domcontentloaded")
        self.page.wait_for_function("window.jupyterapp && window.jupyterapp.started")
        self.page.evaluate("window.jupyterapp.restored")
        self.page.wait_for_selector(".jp-NotebookPanel .jp-Cell")
        self.wait_kernel_idle()

    def wait_kernel_idle(self) -> None:
        self.page.wait_for_function(
            """() => {
            const w = window.jupyterapp.shell.currentWidget;
            const k = w && w.sessionContext && w.sessionContext.session
                      && w.sessionContext.session.kernel;
            return !!k && k.status === 'idle';
        }"""
        )

    def run_all(self) -> None:
        self.page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")
        self.page.wait_for_function(
            """() => {
            const w = window.jupyterapp.shell.currentWidget;
            const cells = w.content.widgets.filter(c => c.model.type === 'code');
            return w.sessionContext.session.kernel.status === 'idle'
                && cells.every(c => c.model.executionCount !== null);
        }"""
        )

    def run_cell(self, index: int) -> None:
        self.page.evaluate(
            """async (i) => {
            const w = window.jupyterapp.shell.currentWidget;
            w.content.activeCellIndex = i;
            await window.jupyterapp.commands.execute('notebook:run-cell');
        }""",
            index,
        )
        self.wait_kernel_idle()

    def cell_output_text(self, index: int) -> str:
        return str(
            self.page.evaluate(
                """(i) => {
            const w = window.jupyterapp.shell.currentWidget;
            return w.content.widgets[i].node.querySelector('.jp-OutputArea')?.innerText ?? '';
        }""",
                index,
            )
        )

    def kernel_json(self, expression: str) -> Any:
        """Evaluate ``expression`` in the notebook's kernel and return it (JSON round trip).

        Appends a scratch cell that prints a marker line, runs it, and parses the output.
        """
        marker = "__VINLENS_E2E__"
        code = f"import json as _j\nprint({marker!r} + _j.dumps({expression}, default=str))"
        index = int(
            self.page.evaluate(
                """(code) => {
            const w = window.jupyterapp.shell.currentWidget;
            const nb = w.content;
            nb.activeCellIndex = nb.widgets.length - 1;
            window.jupyterapp.commands.execute('notebook:insert-cell-below');
            const cell = nb.widgets[nb.activeCellIndex];
            cell.model.sharedModel.setSource(code);
            return nb.activeCellIndex;
        }""",
                code,
            )
        )
        self.run_cell(index)
        self.page.wait_for_function(
            """([i, m]) => {
            const w = window.jupyterapp.shell.currentWidget;
            const t = w.content.widgets[i].node.querySelector('.jp-OutputArea')?.innerText ?? '';
            return t.includes(m) || t.includes('Error');
        }""",
            arg=[index, marker],
        )
        text = self.cell_output_text(index)
        for line in text.splitlines():
            if line.startswith(marker):
                return json.loads(line[len(marker) :])
        raise AssertionError(f"kernel evaluation of {expression!r} failed:\n{text}")

    def screenshot(self, name: str, locator: Any | None = None) -> Path:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTIFACTS / f"{name}.png"
        (locator or self.page).screenshot(path=str(path))
        return path

    def set_theme(self, dark: bool) -> None:
        theme = "JupyterLab Dark" if dark else "JupyterLab Light"
        self.page.evaluate(
            "(t) => window.jupyterapp.commands.execute('apputils:change-theme', {theme: t})", theme
        )
        self.page.wait_for_function(
            "(d) => document.body.dataset.jpThemeLight === (d ? 'false' : 'true')", arg=dark
        )
        # Lab covers the page with its splash (a dimming overlay and the animated round
        # logo) while the theme loads: a screenshot taken before it fades shows both.
        self.page.wait_for_function("() => !document.getElementById('jupyterlab-splash')")


@pytest.fixture
def lab(lab_server: dict[str, Any], browser_ctx: Any) -> Iterator[Lab]:
    page = browser_ctx.new_page()
    helper = Lab(page, lab_server)
    page.on("pageerror", lambda e: helper.errors.append(str(e)))
    page.on("console", lambda m: m.type == "error" and helper.errors.append(m.text))
    page.on("console", lambda m: m.type == "warning" and helper.warnings.append(m.text))
    yield helper
    page.close()
