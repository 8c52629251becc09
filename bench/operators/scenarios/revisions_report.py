"""S11's section of the results file, from its record (see ``revisions``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from bench.operators.scenarios.revisions_census import AUDIT_WRITES
from bench.operators.tables import goal_word, ratio_goal, verdict

#: Bundles each Deployment reads.
PER_DEPLOYMENT = 10
#: The goal: cbop writes of one content change of one bundle read by one Deployment.
SINGLE_GOAL = 6
#: kube-controller-manager's garbage collector, as the audit log's user agent names it.
GARBAGE_COLLECTOR = "generic-garbage-collector"


def total(d: Mapping[str, float]) -> float:
    """The writes of a ``verb object code -> count`` map."""
    return sum(v for k, v in d.items() if k.split(" ")[0] in AUDIT_WRITES)


def _writes_only(d: Mapping[str, float]) -> dict[str, float]:
    return {k: v for k, v in d.items() if k.split(" ")[0] in AUDIT_WRITES}


def count(x: float) -> str:
    return f"{x:,.0f}" if x == int(x) else f"{x:,.1f}"


def cells(d: Mapping[str, float]) -> str:
    """``verb object code: n, ...`` of a write map (``none`` when empty)."""
    return ", ".join(f"{k}: {count(v)}" for k, v in sorted(_writes_only(d).items())) or "none"


def merge(ds: Iterable[Mapping[str, float]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for d in ds:
        for k, v in d.items():
            out[k] = out.get(k, 0) + v
    return out


def gc_writes(kcm: Mapping[str, float]) -> dict[str, float]:
    """The garbage collector's writes in a ``controller verb object code`` map."""
    return {k: v for k, v in kcm.items() if k.startswith(GARBAGE_COLLECTOR + " ")}


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
        + f"; revisions `keep: {s['keep']}` in variant `on`, cbop `--revision-grace "
        f"{s.get('grace', 60):g}`; the pin policy installed "
        f"(effective after {r.get('policy_seconds', 0):.1f} s). Variants in order: "
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

    def row(label: str, values: list[str], goal: str = "") -> None:
        lines.append(f"| {label} | " + " | ".join(values) + f" | {goal} |")

    row("bundles Ready, s", [f"{v['converge']['bundles_seconds']:.1f}" for v in vs])
    row(
        "Deployments baselined (`on`: and pinned), s",
        [f"{v['converge'].get('deployments_seconds', 0):.1f}" for v in vs],
    )
    row(
        "... meanwhile: cbop writes",
        [count(total(v["converge"].get("deployments_cbop", {}))) for v in vs],
    )
    row(
        "... meanwhile: ReplicaSets created",
        [
            count(
                sum(
                    n
                    for k, n in v["converge"].get("deployments_kcm", {}).items()
                    if " create replicasets " in k
                )
            )
            for v in vs
        ],
    )
    idle_c = [total(v["idle_converged"]["cbop"]) for v in vs]
    row(
        f"idle {s['idle']:.0f} s converged: cbop writes",
        [count(x) for x in idle_c],
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
    per_round = [total(merge(x["cbop"] for x in v["rounds"])) / len(v["rounds"]) for v in vs]
    row("round: cbop writes (mean)", [f"{x:,.0f}" for x in per_round])
    row("rollouts (Deployment generations) over the rounds", [str(v["rollouts"]) for v in vs])
    row(
        "after the rounds, until the grace passed: cbop writes",
        [count(total(v["after_rounds"]["cbop"])) for v in vs],
    )
    idle_h = [total(v["idle_history"]["cbop"]) for v in vs]
    row(
        f"idle {s['idle']:.0f} s with the history: cbop writes",
        [count(x) for x in idle_h],
        f"0: {goal_word(not any(idle_h))}",
    )
    row("steady RSS after the rounds, MiB", [f"{v['rss']['steady_mib']:.1f}" for v in vs])
    row("steady RSS of a fresh cbop, MiB", [f"{v['fresh']['steady_mib']:.1f}" for v in vs])
    fresh_w = [total(v["fresh"]["writes"]) for v in vs]
    row(
        "writes of the fresh cbop", [count(x) for x in fresh_w], f"0: {goal_word(not any(fresh_w))}"
    )
    if "rss_ratio" in r:
        ok = r["rss_ratio"] <= 1.1
        lines.append(
            f"| RSS on / off | {r['rss_ratio']:.2f}x (fresh {r['rss_fresh_ratio']:.2f}x) "
            + "| " * (len(vs) - 1)
            + f"| <= 1.1x: {goal_word(ok)} |"
        )
    gc = [total_gc(v) for v in vs]
    row(
        "kube-controller-manager's garbage collector: writes over the variant",
        [count(x) for x in gc],
        f"0: {goal_word(not any(gc))}",
    )
    on = r["variants"].get("on")
    if on:
        lines += _census(on, s)
    lines += _singles(r)
    lines += ["", "cbop's writes per round (mean over the rounds):", ""]
    lines += ["| variant | writes |", "|---|---|"]
    for name, v in r["variants"].items():
        merged = merge(x["cbop"] for x in v["rounds"])
        n = len(v["rounds"])
        lines.append(f"| {name} | {cells({k: x / n for k, x in merged.items()})} |")
    lines += ["", "kube-controller-manager's writes over each variant, by controller:", ""]
    lines += ["| variant | writes |", "|---|---|"]
    for name, v in r["variants"].items():
        lines.append(f"| {name} | {_kcm_cells(v.get('kcm_all', {}))} |")
    return [*lines, ""]


def total_gc(variant: Mapping[str, Any]) -> float:
    return sum(gc_writes(variant.get("kcm_all", {})).values())


def _kcm_cells(d: Mapping[str, float]) -> str:
    return ", ".join(f"{k}: {count(v)}" for k, v in sorted(d.items())) or "none"


def _census(on: Mapping[str, Any], s: Mapping[str, Any]) -> list[str]:
    c = on["census"]
    made = s["bundles"] * (s["changes"] + 1)
    lines = [
        "",
        f"Revisions at the end of the rounds, once the grace passed (`on`; {made:,} made), "
        "and after the single changes:",
        "",
        "| measure | after the rounds | after the single changes | goal |",
        "|---|---:|---:|---|",
    ]
    c2 = on.get("census_single") or {}

    def fmt(x: Any) -> str:
        return f"{x:,}" if isinstance(x, int) else str(x)

    def row(label: str, key: str, goal: str = "", zero: bool = False) -> None:
        a, b = c.get(key, "-"), c2.get(key, "-")
        if zero:
            goal = f"0: {goal_word(a == 0 and b in (0, '-'))}"
        lines.append(f"| {label} | {fmt(a)} | {fmt(b)} | {goal} |")

    row("revisions in existence", "revisions")
    row("keep + what the templates name (summed per ConfigMap)", "bound")
    row("revisions beyond that bound", "over_bound", zero=True)
    row(
        "revisions neither current, newest keep nor named (left to collect)",
        "unnamed_past_keep",
        zero=True,
    )
    row("named by a Deployment, ReplicaSet or pod", "named")
    row("named and missing", "referenced_missing", zero=True)
    row("most owner references on a revision", "max_owner_references", "1")
    row("revisions owned by anything but their bundle", "owned_by_others", zero=True)
    row("revisions with no owner reference", "ownerless", zero=True)
    row("largest revision, bytes", "max_revision_bytes")
    row("ReplicaSets", "replicasets")
    row("... most per Deployment", "max_replicasets_per_deployment", f"<= {s['history'] + 1}")
    row("... labelled cbop.dev/pinned", "replicasets_pinned")
    return lines


def drained(sizes: Mapping[str, Any]) -> int:
    """How many of the single changes also collect other bundles' revisions.

    Every bundle changed in every round, so each ReplicaSet of the rounds names a
    revision of every bundle the Deployment reads; as the single changes push them out
    of the history, the revisions of the other bundles they alone named go too, until
    the ReplicaSet leaving names only revisions the other bundles keep anyway (their
    current one and the newest ``keep - 1`` others): after ``history - keep + 1``
    changes.
    """
    return max(0, int(sizes["history"]) - int(sizes["keep"]) + 1)


def steady_singles(r: Mapping[str, Any]) -> list[float]:
    """cbop's writes of each single change (``on``) past :func:`drained`."""
    on = r["variants"].get("on") or {}
    return [total(x["cbop"]) for x in (on.get("singles") or [])[drained(r["sizes"]) :]]


def _singles(r: Mapping[str, Any]) -> list[str]:
    variants = {k: v for k, v in r["variants"].items() if v.get("singles")}
    if not variants:
        return []
    s = r["sizes"]
    drain = drained(s)
    lines = [
        "",
        f"Content changes of one bundle (read by one Deployment that reads {PER_DEPLOYMENT}), "
        "one after the other after the rounds, each counted until the grace passed: cbop's "
        f"writes by verb, object and answer. The first {drain} also collect, for each other "
        "bundle, the revision only the ReplicaSet leaving the history named (every bundle "
        "changed in every round).",
        "",
        "| change | " + " | ".join(f"{k}: cbop writes" for k in variants) + " | on: by verb and "
        "object | on: kube-controller-manager | goal (on) |",
        "|---:|" + "---:|" * len(variants) + "---|---|---|",
    ]
    n = max(len(v["singles"]) for v in variants.values())
    on = variants.get("on", {}).get("singles", [])
    for i in range(n):
        cols = [
            count(total(v["singles"][i]["cbop"])) if i < len(v["singles"]) else "-"
            for v in variants.values()
        ]
        breakdown = cells(on[i]["cbop"]) if i < len(on) else "-"
        kcm = _kcm_cells(on[i]["kcm"]) if i < len(on) else "-"
        goal = "(the rounds' history leaving)"
        if i >= drain and i < len(on):
            goal = f"<= {SINGLE_GOAL}: {goal_word(total(on[i]['cbop']) <= SINGLE_GOAL)}"
        lines.append(f"| {i + 1} | " + " | ".join(cols) + f" | {breakdown} | {kcm} | {goal} |")
    return lines


def goals(results: Mapping[str, Any]) -> list[str]:
    """S11's lines of the Goals section."""
    r = results.get("s11")
    if not r or "on" not in r["variants"]:
        return []
    out = []
    steady = steady_singles(r)
    if steady:
        worst = max(steady)
        out.append(
            f"- S11 one content change of one bundle (changes {drained(r['sizes']) + 1}-"
            f"{drained(r['sizes']) + len(steady)}), cbop writes: at most {count(worst)}, goal "
            f"<= {SINGLE_GOAL} — {verdict(worst <= SINGLE_GOAL)}"
        )
    gc = total_gc(r["variants"]["on"])
    out.append(f"- S11 garbage-collector writes (on): {count(gc)} — {verdict(gc == 0)}")
    if "rss_ratio" in r:
        out += ratio_goal(
            "S11 steady RSS after the rounds, on / off",
            r["variants"]["on"]["rss"]["steady_mib"],
            r["variants"]["off"]["rss"]["steady_mib"],
            1.1,
        )
    return out
