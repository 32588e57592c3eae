"""Widget CSS works without JupyterLab's theme: every --jp-* variable falls back to a
vinlens default, light and dark, and the defaults are legible."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
JS = REPO / "js"
THEME = JS / "lib" / "theme.css"
CSS_FILES = sorted(JS.rglob("*.css"))
STATIC = REPO / "src" / "vinlens" / "widgets" / "static"


def _strip_comments(text: str) -> str:
    return re.sub(r"/\*.*?\*/", "", text, flags=re.S)


def _jp_uses(text: str) -> list[tuple[str, str]]:
    """Each `var(--jp-...)` as (name, whole expression), parentheses matched."""
    uses = []
    for m in re.finditer(r"var\(\s*--jp-([a-z0-9-]+)", text):
        depth, k = 0, m.start()
        while True:
            ch = text[k]
            if ch == "(":
                depth += 1
            elif ch == ")":
                depth -= 1
                if depth == 0:
                    break
            k += 1
        uses.append((m.group(1), text[m.start() : k + 1]))
    return uses


def _block(text: str, start: int) -> str:
    """The body of the `{...}` block opening at or after `start`."""
    open_at = text.index("{", start)
    depth = 0
    for k in range(open_at, len(text)):
        if text[k] == "{":
            depth += 1
        elif text[k] == "}":
            depth -= 1
            if depth == 0:
                return text[open_at + 1 : k]
    raise AssertionError(f"unclosed block in {THEME}")


def _defaults() -> tuple[dict[str, str], dict[str, str]]:
    """The --vl-* defaults of theme.css: (light, dark)."""
    text = _strip_comments(THEME.read_text(encoding="utf-8"))
    light_at = text.index(".vl-root {")
    dark_at = text.index('.vl-root[data-vl-scheme="dark"] {')
    assert light_at < dark_at, "light defaults come first, the dark block overrides them"

    def decls(body: str) -> dict[str, str]:
        return {
            m.group(1): m.group(2).strip()
            for m in re.finditer(r"--vl-([a-z0-9-]+)\s*:\s*([^;]+);", body)
        }

    return decls(_block(text, light_at)), decls(_block(text, dark_at))


def _is_colour(value: str) -> bool:
    return bool(re.fullmatch(r"#[0-9a-fA-F]{3,8}|rgba?\(.*\)|hsla?\(.*\)", value))


@pytest.mark.parametrize("css", CSS_FILES, ids=lambda p: str(p.relative_to(JS)))
def test_every_jp_variable_falls_back_to_the_vinlens_default_of_the_same_name(css):
    text = _strip_comments(css.read_text(encoding="utf-8"))
    light, _ = _defaults()
    bad = [expr for name, expr in _jp_uses(text) if expr != f"var(--jp-{name}, var(--vl-{name}))"]
    assert not bad, (
        f"{css}: write every JupyterLab variable as var(--jp-X, var(--vl-X)) so hosts without "
        f"JupyterLab's theme (VS Code, Colab, marimo) still get light/dark colours; found {bad}"
    )
    undefined = sorted({name for name, _ in _jp_uses(text) if name not in light})
    assert not undefined, f"{css}: --vl-* defaults missing from {THEME}: {undefined}"


@pytest.mark.parametrize("css", CSS_FILES, ids=lambda p: str(p.relative_to(JS)))
def test_no_literal_colours_outside_the_theme_defaults(css):
    if css == THEME:
        pytest.skip("the defaults themselves")
    text = _strip_comments(css.read_text(encoding="utf-8"))
    literals = re.findall(r"#[0-9a-fA-F]{3,8}\b|\brgba?\([^)]*\)|\bhsla?\([^)]*\)", text)
    assert not literals, f"{css}: a literal colour ignores the theme (light and dark): {literals}"


# JupyterLab's own colours for these fall below 4.5:1 as text (axe in tests/e2e); text takes
# the derived --vl-*-text colours of theme.css instead.
TEXT_TOO_WEAK = ["ui-font-color2", "warn-color0", "error-color0", "error-color1", "success-color0"]


@pytest.mark.parametrize("css", CSS_FILES, ids=lambda p: str(p.relative_to(JS)))
def test_text_uses_the_derived_colours_not_the_weak_theme_ones(css):
    text = _strip_comments(css.read_text(encoding="utf-8"))
    weak = "|".join(TEXT_TOO_WEAK)
    found = re.findall(rf"(?<![-\w])color:\s*var\(--jp-({weak})\b", text)
    assert not found, (
        f"{css}: text in --jp-{found} is below 4.5:1 in JupyterLab's themes; use "
        "var(--vl-muted-text), var(--vl-warn-text), var(--vl-error-text) or var(--vl-ok-text)"
    )


def test_every_colour_default_has_a_dark_counterpart():
    light, dark = _defaults()
    assert set(dark) <= set(light), f"dark-only defaults: {sorted(set(dark) - set(light))}"
    colours = {n for n, v in light.items() if _is_colour(v)}
    assert colours, "no colour defaults parsed from theme.css"
    assert colours <= set(dark), f"colours without a dark default: {sorted(colours - set(dark))}"
    same = sorted(n for n in colours if light[n] == dark[n])
    assert not same, f"dark default equals the light one: {same}"


def _luminance(hex_colour: str) -> float:
    h = hex_colour.lstrip("#")
    if len(h) == 3:
        h = "".join(c * 2 for c in h)
    channels = []
    for i in (0, 2, 4):
        c = int(h[i : i + 2], 16) / 255
        channels.append(c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4)
    r, g, b = channels
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def _contrast(a: str, b: str) -> float:
    la, lb = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (la + 0.05) / (lb + 0.05)


# (text, background) pairs the widget CSS puts together.
TEXT_ON = [
    ("ui-font-color1", "layout-color1"),
    ("ui-font-color1", "layout-color2"),
    ("ui-font-color1", "layout-color3"),
    ("ui-font-color1", "input-background"),
    ("ui-font-color2", "layout-color1"),
    ("ui-font-color2", "layout-color2"),
    ("ui-font-color3", "layout-color1"),
    ("ui-inverse-font-color1", "brand-color1"),
    ("ui-inverse-font-color1", "error-color1"),
    ("ui-inverse-font-color1", "warn-color1"),
    ("ui-font-color1", "brand-color3"),
    ("brand-color1", "layout-color1"),
    ("error-color0", "rendermime-error-background"),
    ("error-color1", "layout-color1"),
    ("warn-color0", "layout-color1"),
    ("warn-color0", "layout-color2"),
    ("warn-color0", "warn-color3"),
    ("success-color0", "layout-color1"),
    ("success-color0", "success-color3"),
    ("info-color0", "layout-color2"),
    ("mirror-editor-number-color", "layout-color1"),
    ("mirror-editor-string-color", "layout-color1"),
    ("mirror-editor-variable-2-color", "layout-color1"),
]


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_default_text_colours_reach_wcag_aa_on_their_backgrounds(scheme):
    light, dark = _defaults()
    palette = dict(light, **dark) if scheme == "dark" else light
    low = [
        f"--vl-{fg} {palette[fg]} on --vl-{bg} {palette[bg]}: {_contrast(palette[fg], palette[bg]):.2f}"
        for fg, bg in TEXT_ON
        if _contrast(palette[fg], palette[bg]) < 4.5
    ]
    assert not low, f"{scheme} defaults below 4.5:1 contrast: {low}"


def test_the_front_end_imports_no_jupyterlab_package():
    sources = [p for p in JS.rglob("*.ts") if not p.name.endswith(".test.ts")]
    assert sources
    offenders = [
        str(p)
        for p in sources
        if re.search(r"""from\s+["']@(jupyterlab|lumino|jupyter-widgets)/""", p.read_text("utf-8"))
    ]
    assert not offenders, f"the bundle must run in any anywidget host: {offenders}"


@pytest.mark.skipif(not (STATIC / "manifest.json").exists(), reason="bundle not built")
def test_the_built_css_keeps_the_fallbacks():
    built = sorted(STATIC.glob("*.css"))
    assert built, f"no CSS in {STATIC}"
    for css in built:
        text = css.read_text(encoding="utf-8")
        bad = [
            e
            for n, e in _jp_uses(text)
            if not re.fullmatch(rf"var\(--jp-{n},\s*var\(--vl-{n}\)\)", e)
        ]
        assert not bad, f"{css}: {bad[:5]}"
        assert "--vl-ui-font-color1:" in text, f"{css} lacks the theme defaults"
