"""The tour's model widgets in a marimo notebook (``marimo run``), driven by Chromium.

marimo is its own anywidget host: no JupyterLab, no ipywidgets manager, its own comm for
custom messages and binary buffers, widgets inside a custom element. Checked: the module
table and the snapshot browser render; *Capture* is a command round trip whose snapshot
table comes back as binary buffers and is drawn; a click in the table is synced back to
Python (a cell that reads ``table.value`` and the widget's ``selected_paths`` re-runs and
prints what Python sees); axe-core finds no serious or critical violation.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from axe import axe_violations, describe

pytest.importorskip("marimo", reason="marimo is in the dev extras: pip install -e '.[dev]'")

from playwright.sync_api import expect

HERE = Path(__file__).resolve().parent
ARTIFACTS = Path(os.environ.get("VINLENS_ARTIFACTS", HERE.parents[1] / "artifacts")) / "e2e"

NOTEBOOK = textwrap.dedent(
    """
    import marimo

    app = marimo.App(width="full")


    @app.cell
    def _():
        import marimo as mo
        import torch

        from vinlens.demo import make_camera_images
        from vinlens.demo.config import DemoVinConfig
        from vinlens.model_inspection import CaptureLimits
        from vinlens.widgets import ModuleTableWidget, SnapshotBrowserWidget

        torch.manual_seed(0)
        model = DemoVinConfig().setup_target().eval()
        images = make_camera_images(batch_size=2, seed=0)
        return CaptureLimits, ModuleTableWidget, SnapshotBrowserWidget, images, mo, model


    @app.cell
    def _(ModuleTableWidget, mo, model):
        table_widget = ModuleTableWidget(model)
        table_widget.selected_paths = ["head"]
        table = mo.ui.anywidget(table_widget)
        table
        return table, table_widget


    @app.cell
    def _(CaptureLimits, SnapshotBrowserWidget, images, mo, model, table_widget):
        browser_widget = SnapshotBrowserWidget(
            model, lambda: model(images), module_table=table_widget,
            limits=CaptureLimits(max_tensors=32),
        )
        browser = mo.ui.anywidget(browser_widget)
        browser
        return (browser_widget,)


    @app.cell
    def _(browser_widget, mo, table, table_widget):
        # Re-runs whenever the browser changes the table's value (a selection).
        mo.plain_text(
            "PYTHON selected=" + ",".join(table.value["selected_paths"])
            + " widget=" + ",".join(table_widget.selected_paths)
            + f" snapshots={len(browser_widget.snapshots)}"
        )
        return


    if __name__ == "__main__":
        app.run()
    """
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def marimo_app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yield from _serve(tmp_path_factory.mktemp("marimo"))


@pytest.fixture(scope="module")
def marimo_dark_app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The same notebook with marimo's own theme set to dark in the user's config."""
    w = tmp_path_factory.mktemp("marimo-dark")
    (w / "config" / "marimo").mkdir(parents=True)
    (w / "config" / "marimo" / "marimo.toml").write_text('[display]\ntheme = "dark"\n')
    yield from _serve(w)


def _serve(w: Path) -> Iterator[str]:
    (w / "tour_marimo.py").write_text(NOTEBOOK, encoding="utf-8")
    port = _free_port()
    env = dict(
        os.environ,
        # marimo keeps config and caches under the XDG folders: none in the home directory.
        XDG_CONFIG_HOME=str(w / "config"),
        XDG_CACHE_HOME=str(w / "cache"),
        XDG_STATE_HOME=str(w / "state"),
        XDG_DATA_HOME=str(w / "data"),
        MPLBACKEND="Agg",
        VINLENS_DEMO_DIR=str(w / "demo"),
    )
    log = open(w / "marimo.log", "w")  # noqa: SIM115 - closed in finally
    command = [sys.executable, "-m", "marimo", "run", str(w / "tour_marimo.py"), "--headless"]
    command += ["--host", "127.0.0.1", "--port", str(port), "--no-token", "--no-sandbox"]
    proc = subprocess.Popen(
        [*command, "--no-check"],
        cwd=w,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            if proc.poll() is not None:
                raise RuntimeError(f"marimo exited: {(w / 'marimo.log').read_text()}")
            try:
                urllib.request.urlopen(url + "/health", timeout=1)
                break
            except OSError:
                time.sleep(0.1)
        else:
            raise RuntimeError(f"marimo did not start: {(w / 'marimo.log').read_text()}")
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def _python_line(page: Any) -> str:
    """The line the selection cell printed (marimo shows plain-text outputs in the page)."""
    found = re.search(r"PYTHON selected=[^\n]*", str(page.evaluate("document.body.innerText")))
    return found.group(0) if found else ""


def test_marimo_renders_round_trips_and_syncs_selection(marimo_app, browser_ctx):
    page = browser_ctx.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        page.goto(marimo_app, wait_until="domcontentloaded")
        table = page.locator(".vl-module-table").first
        expect(table.locator(".vl-mt-totals")).to_contain_text("modules", timeout=120_000)
        expect(table.locator(".vl-vt-row.vl-selected")).to_have_count(1)
        browser = page.locator(".vl-snapshot-browser").first
        expect(browser.locator(".vl-sb-capture")).to_be_enabled()
        expect_line = re.compile(r"PYTHON selected=head widget=head snapshots=0")
        _wait_for(page, lambda: expect_line.search(_python_line(page)) is not None, "first run")

        # A command round trip: the capture runs in the kernel, the snapshot table comes back
        # as binary buffers through marimo's comm and is drawn.
        browser.locator(".vl-sb-capture").click()
        expect(browser.locator(".vl-sb-tensors")).to_contain_text("2 / 32", timeout=60_000)
        expect(browser.locator(".vl-sb-results .vl-vt-row:not([hidden])")).to_have_count(2)
        expect(browser.locator(".vl-sb-results")).to_contain_text("[2,4]")

        # A selection made in the browser reaches Python: the cell reading table.value re-runs.
        rgb = table.locator(".vl-mt-name").filter(has_text=re.compile(r"^encoders$"))
        rgb.first.click()
        want = re.compile(r"PYTHON selected=encoders widget=encoders snapshots=2")
        _wait_for(page, lambda: want.search(_python_line(page)) is not None, "selection sync")

        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "marimo-tour.png"), full_page=True)
        for selector in (".vl-module-table", ".vl-snapshot-browser"):
            bad = axe_violations(
                page, ["marimo-anywidget", selector], impacts=("serious", "critical")
            )
            assert not bad, f"{selector} in marimo:\n{describe(bad)}"
        assert errors == [], errors
    finally:
        page.close()


def _wait_for(page: Any, ok: Any, what: str, timeout_s: float = 60) -> None:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if ok():
            return
        page.wait_for_timeout(200)
    raise AssertionError(f"{what}: Python's line is {_python_line(page)!r}")


def test_marimo_dark_theme_on_a_light_os_gives_dark_widgets(marimo_dark_app, browser_ctx):
    page = browser_ctx.new_page()
    try:
        page.emulate_media(color_scheme="light")
        page.goto(marimo_dark_app, wait_until="domcontentloaded")
        table = page.locator(".vl-module-table").first
        expect(table.locator(".vl-mt-totals")).to_contain_text("modules", timeout=120_000)
        probe = table.evaluate(
            """(el) => ({ scheme: el.dataset.vlScheme, bg: getComputedStyle(el).backgroundColor,
                          body: document.body.className, html: document.documentElement.className })"""
        )
        assert probe["scheme"] == "dark", probe
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        table.screenshot(path=str(ARTIFACTS / "marimo-dark-module-table.png"))
    finally:
        page.close()
