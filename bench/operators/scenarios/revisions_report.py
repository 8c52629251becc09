"""S11's section of the results file, from its record (see ``revisions``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from bench.operators.scenarios.revisions_census import AUDIT_WRITES
from bench.operators.tables import goal_word

#: Bundles each Deployment reads.
PER_DEPLOYMENT = 10


def _sum(d: Mapping[str, float]) -> float:
    return sum(v for k, v in d.items() if k.split(" ")[0] in AUDIT_WRITES)


def _writes_only(d: Mapping[str, float]) -> dict[str, float]:
    return {k: v for k, v in d.items() if k.split(" ")[0] in AUDIT_WRITES}


def _count(x: float) -> str:
    return f"{x:,.0f}" if x == int(x) else f"{x:,.1f}"


def _cells(d: Mapping[str, float]) -> str:
    return ", ".join(f"{k}: {_count(v)}" for k, v in sorted(_writes_only(d).items())) or "none"


def _merge(ds: Iterable[Mapping[str, float]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for d in ds:
        for k, v in d.items():
            out[k] = out.get(k, 0) + v
    return out


def markdown(results: Mapping[str, Any]) -> list[str]:
    """The S11 section of the results file (none when it did not run)."""
    r: dict[str, Any] | None = results.get("s11")
    if not r:
        return []
    s = r["sizes"]
    lines = [
        f"### S11 revisions: {s['bundles']:,} bundles read by {s['deployments']} rolled "
        f"Deployments, {s['changes']} changes each",
        "",
        f"{s['namespaces']} namespaces; each Deployment reads {PER_DEPLOYMENT} bundles, "
        f"`replicas: {s['replicas']}`, `revisionHistoryLimit: {s['history']}`"
        + f"; revisions `keep: {s['keep']}` in variant `on`. Variants in order: "
        + ", ".join(s["variants"])
        + ".",
        "",
    ]
    for name, v in r["variants"].items():
        lines.append(
            f"Load average ({name}): " + "; ".join(f"{k} {x}" for k, x in v["load"].items()) + "."
        )
    lines += ["", "| measure | " + " | ".join(r["variants"]) + " | goal |"]
    lines.append("|---|" + "---:|" * len(r["variants"]) + "---|")
    vs = list(r["variants"].values())

    def row(label: str, cells: list[str], goal: str = "") -> None:
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {goal} |")

    row("bundles Ready, s", [f"{v['converge']['bundles_seconds']:.1f}" for v in vs])
    if all("settle_converged" in v for v in vs):
        row(
            "converged: pins settle, s (cbop writes meanwhile)",
            [
                f"{v['settle_converged']['seconds']:.1f} "
                f"({_count(_sum(v['settle_converged']['cbop']))})"
                for v in vs
            ],
        )
    idle_c = [_sum(v["idle_converged"]["cbop"]) for v in vs]
    row(
        f"idle {s['idle']:.0f} s converged: cbop writes",
        [str(x) for x in idle_c],
        f"0: {goal_word(not any(idle_c))}",
    )
    ready = [[x["ready_seconds"] for x in v["rounds"]] for v in vs]
    quiet = [[x["seconds"] for x in v["rounds"]] for v in vs]
    row(
        "round: all Ready, s (mean / max)", [f"{sum(x) / len(x):.1f} / {max(x):.1f}" for x in ready]
    )
    row(
        "round: API quiet, s (mean / max)", [f"{sum(x) / len(x):.1f} / {max(x):.1f}" for x in quiet]
    )
    per_round = [_sum(_merge(x["cbop"] for x in v["rounds"])) / len(v["rounds"]) for v in vs]
    row("round: cbop writes (mean)", [f"{x:,.0f}" for x in per_round])
    row("rollouts (Deployment generations) over the rounds", [str(v["rollouts"]) for v in vs])
    if all("settle_history" in v for v in vs):
        row(
            "after the rounds: stale pins entries; s until none (cbop writes meanwhile)",
            [
                f"{v['settle_history']['stale_at_start']}; "
                f"{v['settle_history']['seconds_to_no_stale']:.1f} "
                f"({_count(_sum(v['settle_history']['cbop']))})"
                for v in vs
            ],
            "settled: " + goal_word(all(v["settle_history"]["settled"] for v in vs)),
        )
    idle_h = [_sum(v["idle_history"]["cbop"]) for v in vs]
    row(
        f"idle {s['idle']:.0f} s with the history: cbop writes",
        [str(x) for x in idle_h],
        f"0: {goal_word(not any(idle_h))}",
    )
    row("steady RSS after the rounds, MiB", [f"{v['rss']['steady_mib']:.1f}" for v in vs])
    row("steady RSS of a fresh cbop, MiB", [f"{v['fresh']['steady_mib']:.1f}" for v in vs])
    fresh_w = [_sum(v["fresh"]["writes"]) for v in vs]
    row("writes of the fresh cbop", [str(x) for x in fresh_w], f"0: {goal_word(not any(fresh_w))}")
    if "rss_ratio" in r:
        lines.append(
            f"| RSS on / off | {r['rss_ratio']:.2f}x (fresh {r['rss_fresh_ratio']:.2f}x) "
            + "| " * (len(vs) - 1)
            + "| |"
        )
    on = r["variants"].get("on")
    if on:
        c = on["census"]
        made = s["bundles"] * (s["changes"] + 1)
        lines += [
            "",
            f"Revisions at the end of the rounds (`on`; {made:,} made):",
            "",
            "| measure | value | goal |",
            "|---|---:|---|",
            f"| revisions in existence | {c['revisions']:,} | <= keep + referenced |",
            f"| keep + what the history references (summed per bundle) | {c['bound']:,} | |",
            f"| revisions beyond that bound | {c['over_bound']} "
            f"| 0: {goal_word(c['over_bound'] == 0)} |",
            f"| held by their bundle (max per bundle) | {c['held_by_bundle']:,} "
            f"({c['max_held_by_bundle']}) | |",
            f"| held by their bundle past keep, referenced by nothing | "
            f"{c.get('held_unreferenced_over_keep', '?')} | 0: "
            f"{goal_word(c.get('held_unreferenced_over_keep') == 0)} |",
            f"| held by a ReplicaSet only | {c['held_by_history_only']:,} | |",
            f"| held by nothing (of which with no owner reference at all) | {c['orphans']} "
            f"({c.get('ownerless', '?')}) | 0: {goal_word(c['orphans'] == 0)} |",
            *(
                [
                    f"| held by nothing once the single change settled "
                    f"| {on['census_single']['orphans']} "
                    f"({on['census_single'].get('ownerless', '?')}) "
                    f"| 0: {goal_word(on['census_single']['orphans'] == 0)} |"
                ]
                if "census_single" in on
                else []
            ),
            f"| referenced by the history (pins of existing ReplicaSets) | {c['referenced']:,} | |",
            f"| referenced and missing | {c['referenced_missing']} "
            f"| 0: {goal_word(c['referenced_missing'] == 0)} |",
            f"| ReplicaSets (max per Deployment) | {c['replicasets']:,} "
            f"({c['max_replicasets_per_deployment']}) | <= {s['history'] + 1} per Deployment: "
            f"{goal_word(c['max_replicasets_per_deployment'] <= s['history'] + 1)} |",
            f"| ReplicaSets with replicas > 0 | {c['replicasets_with_replicas']} | |",
            f"| pins ConfigMap size, bytes (max per namespace) "
            f"| {max(c['pins_bytes'].values(), default=0):,} | |",
        ]
        if "pins_entries" in c:
            stale = sum(c["pins_stale"].values())
            lines += [
                f"| pins entries (max per namespace) | {sum(c['pins_entries'].values()):,} "
                f"({max(c['pins_entries'].values(), default=0)}) | |",
                f"| pins entries nothing carries | {stale} | 0: {goal_word(stale == 0)} |",
                "",
                "Pins ConfigMaps at the end of the rounds (after they settled), per namespace:",
                "",
                "| namespace | entries | bytes |",
                "|---|---:|---:|",
            ]
            for ns in sorted(c["pins_entries"]):
                lines.append(f"| {ns} | {c['pins_entries'][ns]} | {c['pins_bytes'][ns]:,} |")
            if "settle_history" in on:
                w = _sum(on["settle_history"]["cbop"])
                lines += [
                    "",
                    f"While the pins settled after the rounds "
                    f"({on['settle_history']['seconds']:.1f} s, "
                    f"{on['settle_history']['stale_at_start']} stale entries at the start), "
                    f"cbop wrote {_count(w)} times: {_cells(on['settle_history']['cbop'])}.",
                ]
    lines += ["", "One content change of one bundle after the rounds, writes by client:", ""]
    lines += ["| variant | cbop | kube-controller-manager |", "|---|---|---|"]
    for name, v in r["variants"].items():
        lines.append(f"| {name} | {_cells(v['single']['cbop'])} | {_cells(v['single']['kcm'])} |")
    if all("single_later" in v for v in r["variants"].values()):
        lines += [
            "",
            "Then, until the pins settled (the dropped ReplicaSet's entry after the grace, "
            "and the revision it alone held), writes by client:",
            "",
            "| variant | s after the change | cbop | kube-controller-manager | cbop in all |",
            "|---|---:|---|---|---:|",
        ]
        for name, v in r["variants"].items():
            later = v["single_later"]
            total = _sum(v["single"]["cbop"]) + _sum(later["cbop"])
            lines.append(
                f"| {name} | {later['seconds_after_change']:.1f} | {_cells(later['cbop'])} "
                f"| {_cells(later['kcm'])} | {_count(total)} |"
            )
    lines += ["", "cbop's writes per round (mean over the rounds):", ""]
    lines += ["| variant | writes |", "|---|---|"]
    for name, v in r["variants"].items():
        merged = _merge(x["cbop"] for x in v["rounds"])
        n = len(v["rounds"])
        lines.append(f"| {name} | {_cells({k: x / n for k, x in merged.items()})} |")
    return [*lines, ""]
