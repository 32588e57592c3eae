"""Every widget on a page without JupyterLab (no --jp-* variables), light and dark.

The page (tests/e2e/host_page) loads each built bundle and its CSS and renders it the way
anywidget's front end does, with a small model fed from the state of a real widget that
tests/e2e/host_states.py built like the tour. What VS Code, Colab or marimo give a widget
is this: a page, the browser's colour scheme, no theme variables. Checked: it renders with
no page error, its background follows the colour scheme, and axe-core's colour-contrast rule
finds no text below WCAG AA. Screenshots: artifacts/e2e/nohost-<widget>-<scheme>.png.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from axe import axe_violations, describe

from vinlens.widgets._base import STATIC_DIR

HERE = Path(__file__).resolve().parent
ARTIFACTS = Path(os.environ.get("VINLENS_ARTIFACTS", HERE.parents[1] / "artifacts")) / "e2e"
WIDGETS = [
    "config_tree",
    "module_table",
    "snapshot_browser",
    "store_dashboard",
    "coverage_heatmap",
    "attribution_viewer",
    "model_health",
    "store_compare",
    "training_monitor",
    "run_compare",
]


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def host_page(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if not (STATIC_DIR / "manifest.json").exists():
        pytest.fail(f"the bundle is not built ({STATIC_DIR}): run `npm run build`")
    root = tmp_path_factory.mktemp("host-page")
    for name in ("index.html", "host.js"):
        shutil.copy(HERE / "host_page" / name, root / name)
    shutil.copytree(STATIC_DIR, root / "static")
    env = dict(os.environ, VINLENS_DEMO_DIR=str(root / "demo"), MPLBACKEND="Agg")
    done = subprocess.run(
        [sys.executable, str(HERE / "host_states.py"), str(root / "states")],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    server = ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(root))
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/index.html"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def test_every_built_widget_has_a_state_builder():
    built = set(json.loads((STATIC_DIR / "manifest.json").read_text())["widgets"])
    assert built <= set(WIDGETS), (
        f"add {sorted(built - set(WIDGETS))} to tests/e2e/host_states.py and WIDGETS here, "
        "so every widget is checked outside JupyterLab"
    )


def _luminance(css_colour: str) -> float:
    """Relative luminance of a computed `rgb(...)`/`rgba(...)` colour (alpha ignored)."""
    inner = css_colour[css_colour.index("(") + 1 : css_colour.index(")")]
    parts = [float(p) for p in inner.replace("/", " ").replace(",", " ").split()[:3]]
    lin = [
        c / 255 / 12.92 if c / 255 <= 0.04045 else ((c / 255 + 0.055) / 1.055) ** 2.4 for c in parts
    ]
    return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]


@pytest.mark.parametrize("scheme", ["light", "dark"])
@pytest.mark.parametrize("widget", WIDGETS)
def test_widget_is_legible_without_jupyterlab_theme(host_page, browser_ctx, widget, scheme):
    page = browser_ctx.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: m.type == "error" and errors.append(m.text))
    try:
        page.emulate_media(color_scheme=scheme)
        page.goto(host_page, wait_until="domcontentloaded")
        page.wait_for_function("window.vlHost !== undefined")
        title = page.evaluate("(n) => window.vlHost.mount(n)", widget)
        root = page.locator(f'.host-cell[data-widget="{widget}"] .vl-root').first
        root.wait_for(state="visible")
        page.wait_for_timeout(300)  # canvases and virtual tables paint on the next frames
        assert errors == [], f"{title}: {errors}"

        # No theme variables at all: what the widget shows comes from its own defaults.
        probe = page.evaluate(
            """(sel) => {
                const el = document.querySelector(sel);
                const s = getComputedStyle(el);
                return { jp: s.getPropertyValue('--jp-layout-color1'),
                         vl: s.getPropertyValue('--vl-layout-color1').trim(),
                         bg: s.backgroundColor, fg: s.color };
            }""",
            f'.host-cell[data-widget="{widget}"] .vl-root',
        )
        assert probe["jp"] == "", f"the host page must not define --jp-*: {probe}"
        assert probe["vl"], f"{title}: the --vl-* defaults are not applied: {probe}"
        bg, fg = _luminance(probe["bg"]), _luminance(probe["fg"])
        if scheme == "dark":
            assert bg < 0.05 < 0.5 < fg, f"{title} is not dark in a dark colour scheme: {probe}"
        else:
            assert fg < 0.05 < 0.8 < bg, f"{title} is not light in a light colour scheme: {probe}"

        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.locator(f'.host-cell[data-widget="{widget}"]').screenshot(
            path=str(ARTIFACTS / f"nohost-{widget}-{scheme}.png")
        )
        low = axe_violations(
            page, f'.host-cell[data-widget="{widget}"] .vl-root', rules=["color-contrast"]
        )
        assert not low, f"{title} ({scheme}, no JupyterLab theme):\n{describe(low)}"
    finally:
        page.close()


_ROOT_COLOURS = """() => Array.from(document.querySelectorAll('.host-cell .vl-root')).map((el) => {
    const s = getComputedStyle(el);
    return { widget: el.closest('.host-cell').dataset.widget, scheme: el.dataset.vlScheme,
             bg: s.backgroundColor, fg: s.color };
})"""


def test_widgets_follow_the_host_theme_mark_over_the_browser_scheme(host_page, browser_ctx):
    """VS Code marks its theme with a body class, whatever the OS colour scheme says; a
    user switching the editor's theme switches every widget on the page, live."""
    page = browser_ctx.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        page.emulate_media(color_scheme="light")
        page.goto(host_page, wait_until="domcontentloaded")
        page.wait_for_function("window.vlHost !== undefined")
        page.evaluate("() => document.body.classList.add('vscode-dark')")
        for widget in WIDGETS:
            page.evaluate("(n) => window.vlHost.mount(n)", widget)
        page.wait_for_timeout(300)
        roots = page.evaluate(_ROOT_COLOURS)
        assert [r["widget"] for r in roots] == WIDGETS
        for r in roots:
            assert r["scheme"] == "dark", r
            assert _luminance(r["bg"]) < 0.05 < 0.5 < _luminance(r["fg"]), r
        page.evaluate("() => { document.body.className = 'vscode-light'; }")
        page.wait_for_timeout(300)
        for r in page.evaluate(_ROOT_COLOURS):
            assert r["scheme"] == "light", r
            assert _luminance(r["fg"]) < 0.05 < 0.8 < _luminance(r["bg"]), r
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "nohost-vscode-switch.png"), full_page=False)
        assert errors == [], errors
    finally:
        page.close()
