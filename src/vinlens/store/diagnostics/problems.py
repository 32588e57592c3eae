"""What a user should not overlook in a store's statistics, ranked by severity.

The CLI, the dashboard and any other front end show the list :func:`dashboard_problems`
returns, so they agree on what is an error, a warning or a notice.
"""

from __future__ import annotations

from vinlens.store.diagnostics.correlation import pearson_r
from vinlens.store.diagnostics.records import VinOfflineDatasetStats

# pearson_r is re-exported: it is a public name of this module, though correlation owns it.
__all__ = ["PROBLEM_SEVERITIES", "dashboard_problems", "pearson_r", "scan_scope"]

#: Severities, most severe first.
PROBLEM_SEVERITIES = ("error", "warning", "notice")

#: Sample keys spelled out in the no-valid-candidate warning.
_LISTED_KEYS = 5


def scan_scope(stats: VinOfflineDatasetStats) -> str:
    """Which rows the numbers come from, in words: "all 288 rows scanned" when every row
    was read, else "512 of 10,000 rows sampled" (the rows actually read, never the cap)."""
    scanned, total = int(stats.sampled_samples), int(stats.num_samples)
    if scanned >= total:
        return f"all {total:,} {_rows(total)} scanned"
    return f"{scanned:,} of {total:,} {_rows(total)} sampled"


def _rows(n: int) -> str:
    return "row" if n == 1 else "rows"


def dashboard_problems(stats: VinOfflineDatasetStats) -> list[dict[str, str]]:
    """Problems of one statistics record as ``{"severity", "title", "detail"}``, most severe first.

    Errors are the integrity findings (missing chunks, mismatched blocks, refused
    chunks, unreadable records, non-finite values, ...). Warnings and notices are facts a
    user should not overlook in the other numbers: a warning for rows without any valid
    candidate; notices for labelled rows that cannot be paired by candidate identity and
    for a store without scene supervision. Counts are of the rows read, and each title
    says which rows those are (:func:`scan_scope`). Within a severity, the order is the
    record's.
    """
    problems: list[dict[str, str]] = []
    for problem in stats.integrity_problems:
        where = "/".join(str(part) for part in (problem.shard_id, problem.block) if part)
        problems.append(
            {
                "severity": "error",
                "title": f"{problem.kind}{f' in shard {where}' if where else ''}",
                "detail": problem.message,
            }
        )
    no_valid = [s.sample_key for s in stats.sample_summaries if s.candidate_count == 0]
    if no_valid:
        shown = ", ".join(no_valid[:_LISTED_KEYS]) + (", …" if len(no_valid) > _LISTED_KEYS else "")
        problems.append(
            {
                "severity": "warning",
                "title": f"{len(no_valid):,} {_rows(len(no_valid))} without any valid candidate "
                f"({scan_scope(stats)})",
                "detail": shown,
            }
        )
    unpaired = max(
        stats.rri_pairing_unavailable_count, len(stats.rri_pairing_unavailable_sample_keys)
    )
    if unpaired:
        problems.append(
            {
                "severity": "notice",
                "title": f"{unpaired:,} labelled {_rows(unpaired)} without candidate IDs "
                f"({scan_scope(stats)})",
                "detail": "RRI/component pairs exclude them; their marginal histograms still "
                "count them.",
            }
        )
    if not stats.scene_labels_available:
        problems.append(
            {
                "severity": "notice",
                "title": "No scene supervision in this store",
                "detail": "capabilities.scene_labels is false: candidate counts, RRI and "
                "components are unavailable (not zero).",
            }
        )
    order = {severity: i for i, severity in enumerate(PROBLEM_SEVERITIES)}
    return sorted(problems, key=lambda p: order[p["severity"]])
