"""The built wheel, torch and JupyterLab, nothing else, run the tour (`vinlens demo --check`).

What a newcomer does: ``pip install vinlens-*.whl torch==2.13.0 jupyterlab`` in a clean
virtual environment. No pandas, pyarrow, dask or numba there: a tour cell that needs an
extra says so in one line and the tour goes on. Slow (pip resolves JupyterLab's
dependencies; torch comes from pip's cache or the local index).
"""

from __future__ import annotations

import os
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
STATIC = REPO / "src" / "vinlens" / "widgets" / "static"


def _run(cmd: list[str], *, env: dict[str, str] | None = None, timeout: int) -> str:
    done = subprocess.run(
        cmd, capture_output=True, text=True, timeout=timeout, env=env, check=False, cwd=REPO
    )
    assert done.returncode == 0, (
        f"{' '.join(cmd)} failed:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    )
    return done.stdout + done.stderr


@pytest.mark.slow
@pytest.mark.timeout(2400)
def test_wheel_with_torch_and_jupyterlab_alone_runs_the_tour(tmp_path: Path):
    if not (STATIC / "manifest.json").exists():
        pytest.fail(f"the widget bundle is not built ({STATIC}): run `npm run build`")
    dist = tmp_path / "dist"
    _run(
        [sys.executable, "-m", "pip", "wheel", ".", "--no-deps", "-w", str(dist), "-q"], timeout=600
    )
    (wheel,) = dist.glob("vinlens-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "vinlens/py.typed" in names, "the wheel must ship py.typed (PEP 561)"
    assert "vinlens/widgets/static/manifest.json" in names, "the wheel must carry the bundle"

    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True, clear=True).create(env_dir)
    py = str(env_dir / "bin" / "python")
    _run(
        [py, "-m", "pip", "install", "-q", str(wheel), "torch==2.13.0", "jupyterlab"],
        timeout=1500,
    )
    missing = subprocess.run(
        [py, "-c", "import pandas"], capture_output=True, text=True, check=False
    )
    assert missing.returncode != 0, "pandas came along: this would not test the plain install"

    env = {
        "PATH": f"{env_dir / 'bin'}:/usr/bin:/bin",
        "HOME": str(tmp_path / "home"),
        "TMPDIR": str(tmp_path),
        "JUPYTER_CONFIG_DIR": str(tmp_path / "jcfg"),
        "JUPYTER_DATA_DIR": str(tmp_path / "jdata"),
        "JUPYTER_RUNTIME_DIR": str(tmp_path / "jrt"),
        "JUPYTER_PLATFORM_DIRS": "1",
        "MPLBACKEND": "Agg",
        "LANG": os.environ.get("LANG", "C.UTF-8"),
    }
    out = _run(
        [str(env_dir / "bin" / "vinlens"), "demo", "--dir", str(tmp_path / "demo"), "--check"],
        env=env,
        timeout=900,
    )
    assert "code cells ran" in out, out
