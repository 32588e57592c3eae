"""axe-core (npm devDependency) in an e2e page: inject node_modules/axe-core/axe.min.js and
run it on one element. Used by the no-theme host page, marimo and JupyterLab tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

AXE_JS = Path(__file__).resolve().parents[2] / "node_modules" / "axe-core" / "axe.min.js"
WCAG_AA = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]


def inject_axe(page: Any) -> None:
    if not AXE_JS.exists():
        pytest.fail(f"{AXE_JS} missing: run `npm ci` (axe-core is a devDependency)")
    if not page.evaluate("typeof window.axe === 'object'"):
        page.add_script_tag(path=str(AXE_JS))


def axe_violations(
    page: Any,
    selector: str | list[str],
    *,
    rules: list[str] | None = None,
    impacts: tuple[str, ...] = (),
) -> list[dict[str, Any]]:
    """axe violations inside every element matching ``selector`` (WCAG 2.1 A/AA, or ``rules``),
    only those of ``impacts`` when given; each with its rule id, impact, help and nodes.

    A list selector reaches into shadow roots (axe's ``fromShadowDom``): the shadow host's
    selector first, then the selector inside it (marimo renders widgets in a shadow root)."""
    inject_axe(page)
    found: list[dict[str, Any]] = page.evaluate(
        """async ([selector, rules, tags]) => {
            const runOnly = rules ? { type: "rule", values: rules } : { type: "tag", values: tags };
            const include = Array.isArray(selector) ? [{ fromShadowDom: selector }] : [[selector]];
            const result = await window.axe.run({ include },
                                                { runOnly, resultTypes: ["violations"] });
            return result.violations.map((v) => ({
                id: v.id, impact: v.impact, help: v.help,
                nodes: v.nodes.map((n) => ({ target: n.target.join(" "),
                                             summary: n.failureSummary,
                                             html: n.html.slice(0, 240) })),
            }));
        }""",
        [selector, rules, WCAG_AA],
    )
    return [v for v in found if not impacts or v["impact"] in impacts]


def describe(violations: list[dict[str, Any]]) -> str:
    lines = []
    for v in violations:
        lines.append(f"{v['id']} ({v['impact']}): {v['help']}")
        for n in v["nodes"][:6]:
            lines.append(f"    {n['target']}: {n['summary']}\n      {n['html']}")
    return "\n".join(lines)


def axe_checked_nodes(page: Any, selector: str, rule: str) -> int:
    """How many nodes axe's ``rule`` applied to inside ``selector`` (passed, failed or unsure):
    a guard against a host layout that makes axe skip everything as clipped."""
    inject_axe(page)
    return int(
        page.evaluate(
            """async ([selector, rule]) => {
                const r = await window.axe.run({ include: [[selector]] },
                                               { runOnly: { type: "rule", values: [rule] } });
                return [...r.passes, ...r.violations, ...r.incomplete]
                    .reduce((n, v) => n + v.nodes.length, 0);
            }""",
            [selector, rule],
        )
    )
