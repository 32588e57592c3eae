"""Widget assets: looked up when a widget is created, hot-reloadable, current module format."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import vinlens
from vinlens.widgets import ConfigTreeWidget
from vinlens.widgets._base import STATIC_DIR, WidgetAsset

REPO = Path(__file__).resolve().parents[2]
ENTRIES = sorted(
    p for p in (REPO / "js" / "widgets").glob("*.ts") if not p.name.endswith(".test.ts")
)


def test_import_works_before_the_bundle_is_built_and_creation_names_the_missing_file(tmp_path):
    # A copy of the package without static/: what a fresh clone has before `npm run build`.
    package = Path(vinlens.__file__).parent
    shutil.copytree(
        package,
        tmp_path / "vinlens",
        ignore=shutil.ignore_patterns("static", "__pycache__"),
    )
    script = (
        "import vinlens.widgets as w\n"
        "from vinlens.demo.config import DemoVinConfig\n"
        "try:\n"
        "    w.ConfigTreeWidget(DemoVinConfig())\n"
        "except FileNotFoundError as exc:\n"
        "    print('ERR', exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    missing = tmp_path / "vinlens" / "widgets" / "static" / "config_tree.js"
    assert f"ERR vinlens front-end bundle {missing} is missing" in done.stdout
    assert "npm run build" in done.stdout


@pytest.mark.skipif(not (STATIC_DIR / "config_tree.js").exists(), reason="bundle not built")
def test_assets_are_the_built_files_and_follow_hot_reload():
    from vinlens.demo.config import DemoVinConfig

    asset = ConfigTreeWidget._esm
    assert isinstance(asset, WidgetAsset)
    w = ConfigTreeWidget(DemoVinConfig())
    assert w._esm == (STATIC_DIR / "config_tree.js").read_text(encoding="utf-8")
    assert w._css == (STATIC_DIR / "config_tree.css").read_text(encoding="utf-8")
    # One contents object per file, shared by every widget: anywidget's watcher (under
    # ANYWIDGET_HMR=1) emits `changed` on it and every live widget takes the new code.
    contents = asset.resolve()
    assert contents is asset.resolve()
    other = ConfigTreeWidget(DemoVinConfig())
    contents.changed.emit("export default { render() { return () => {}; } };")  # type: ignore[attr-defined]
    assert w._esm == other._esm == "export default { render() { return () => {}; } };"


@pytest.mark.parametrize("entry", ENTRIES, ids=[p.stem for p in ENTRIES])
def test_every_widget_entry_uses_the_default_export_format(entry):
    # anywidget warns ("Direct export of a 'render'...") when the module exports `render`
    # by name; the current format is `export default { render }` (and `initialize`).
    source = entry.read_text(encoding="utf-8")
    assert re.search(r"^export default \{[^}]*\brender\b[^}]*\};?$", source, re.M), entry.name
    assert not re.search(r"^export (async )?function (render|initialize)\b", source, re.M)
    assert not re.search(r"^export \{[^}]*\b(render|initialize)\b", source, re.M)
