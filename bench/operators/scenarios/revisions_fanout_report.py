"""S12's section of the results file and its goals, from its record (see ``revisions_fanout``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bench.operators.scenarios.revisions_report import cells, count, merge, total
from bench.operators.tables import goal_word, ratio_goal, verdict

#: Goals: cbop writes and converge time against revisions off; the largest object.
WRITES_RATIO = 1.1
CONVERGE_RATIO = 1.2
MAX_OBJECT_BYTES = 16 * 1024


def round_writes(v: Mapping[str, Any]) -> dict[str, float]:
    """cbop's writes over the rounds and until the grace passed after them."""
    return merge([*(x["cbop"] for x in v["rounds"]), v["after_rounds"]["cbop"]])


def converge_seconds(v: Mapping[str, Any]) -> float:
    return float(sum(x["converge_seconds"] for x in v["rounds"]))


def _created(kcm: Mapping[str, float], resource: str) -> float:
    return sum(n for k, n in kcm.items() if f" create {resource} " in f" {k} ")


def _status(v: Mapping[str, Any], window: str) -> Mapping[str, Any]:
    found: Mapping[str, Any] = (v.get("audit") or {}).get("status", {}).get(window, {})
    return found


def _conflicts(v: Mapping[str, Any], window: str) -> Mapping[str, Any]:
    found: Mapping[str, Any] = (v.get("audit") or {}).get(window, {}).get("conflicts", {})
    return found


def _sizes(v: Mapping[str, Any], window: str) -> Mapping[str, Any]:
    found: Mapping[str, Any] = (v.get("audit") or {}).get(window, {}).get("sizes", {})
    return found


def largest(v: Mapping[str, Any]) -> tuple[int, str]:
    """The largest object cbop's writes stored over the variant, bytes, and its kind."""
    best = (0, "-")
    for window in ("setup", "rounds"):
        for what, x in _sizes(v, window).get("object", {}).items():
            if x["bytes"] > best[0]:
                best = (x["bytes"], f"{what} {x['name']}")
    return best


def markdown(results: Mapping[str, Any]) -> list[str]:
    """The S12 section of the results file (none when it did not run)."""
    r: dict[str, Any] | None = results.get("s12")
    if not r:
        return []
    s = r["sizes"]
    names = list(r["variants"])
    vs = list(r["variants"].values())
    lines = [
        f"### S12 revisions, shared bundles: {s['deployments']} Deployments in one namespace "
        f"read the same {s['bundles']} bundles, one changes {s['changes']} times",
        "",
        f"`replicas: {s['replicas']}` (pods marked Ready by the bench: {s['ready']}), "
        f"`revisionHistoryLimit: {s['history']}`; revisions `keep: {s['keep']}` in variant "
        f"`on`, cbop `--revision-grace {s['grace']:g}`; the pin policy installed (effective "
        f"after {r.get('policy_seconds', 0):.1f} s). Variants in order: {', '.join(names)}.",
        "",
    ]
    for name, v in r["variants"].items():
        lines.append(
            f"Load average ({name}): " + "; ".join(f"{k} {x}" for k, x in v["load"].items()) + "."
        )
    header = "| measure | " + " | ".join(names)
    if len(vs) == 2:
        header += " | on / off"
    lines += ["", header + " | goal |", "|---|" + "---:|" * (len(vs) + (len(vs) == 2)) + "---|"]

    def row(
        label: str,
        values: list[float],
        fmt: str = "{:,.0f}",
        goal: str = "",
        shown: list[str] | None = None,
    ) -> None:
        ratio = ""
        if len(values) == 2:
            ratio = f" | {values[1] / values[0]:.2f}x" if values[0] else " | -"
        text = shown or [fmt.format(x) for x in values]
        lines.append(f"| {label} | " + " | ".join(text) + ratio + f" | {goal} |")

    row(
        "set-up: bundles, then Deployments set up, s", [v["setup"]["seconds"] for v in vs], "{:.1f}"
    )
    row("set-up: cbop writes", [total(v["setup"]["cbop"]) for v in vs])
    row("set-up: ReplicaSets created", [_created(v["setup"]["kcm"], "replicasets") for v in vs])
    row("set-up: pods created", [_created(v["setup"]["kcm"], "pods") for v in vs])
    status = [_status(v, "setup") for v in vs]
    row(
        "set-up: status writes (of them only `Pinned` changed)",
        [x.get("writes", 0) for x in status],
        shown=[f"{x.get('writes', 0):,} ({x.get('pinned_only', 0):,})" for x in status],
    )
    idle = [total(v["idle_set_up"]["cbop"]) + total(v["idle_end"]["cbop"]) for v in vs]
    row(
        "idle after the set-up and at the end: cbop writes",
        idle,
        goal=f"0: {goal_word(not any(idle))}",
    )
    conv = [converge_seconds(v) for v in vs]
    ok = len(conv) == 2 and conv[1] <= CONVERGE_RATIO * conv[0]
    row(
        "rounds: converge s, summed",
        conv,
        "{:.1f}",
        f"<= {CONVERGE_RATIO}x: {goal_word(ok)}" if len(vs) == 2 else "",
    )
    row(
        "rounds: converge s, max of a round",
        [max(x["converge_seconds"] for x in v["rounds"]) for v in vs],
        "{:.1f}",
    )
    row(
        "rounds: rollouts complete s, summed",
        [sum(x["complete_seconds"] for x in v["rounds"]) for v in vs],
        "{:.1f}",
    )
    row(
        "rounds: cbop CPU s, summed",
        [sum(x["cpu_share"].get("cbop", 0) for x in v["rounds"]) for v in vs],
        "{:.1f}",
    )
    writes = [total(round_writes(v)) for v in vs]
    ok = len(writes) == 2 and writes[1] <= WRITES_RATIO * writes[0]
    row(
        "rounds (and after them until the grace passed): cbop writes",
        writes,
        goal=f"<= {WRITES_RATIO}x: {goal_word(ok)}" if len(vs) == 2 else "",
    )
    row("... per change", [w / s["changes"] for w in writes], "{:,.1f}")
    answered = [
        _conflicts(v, "setup").get("answered_409", 0)
        + _conflicts(v, "rounds").get("answered_409", 0)
        for v in vs
    ]
    row("requests answered 409 (set-up and rounds)", answered)
    twice = [
        _conflicts(v, "setup").get("retried_more_than_once", 0)
        + _conflicts(v, "rounds").get("retried_more_than_once", 0)
        for v in vs
    ]
    row(
        "... answered 409 and retried more than once", twice, goal=f"0: {goal_word(not any(twice))}"
    )
    big = [largest(v) for v in vs]
    row(
        "largest object cbop wrote, bytes",
        [b[0] for b in big],
        goal=f"<= 16 KiB: {goal_word(all(b[0] <= MAX_OBJECT_BYTES for b in big))}",
    )
    row(
        "largest body cbop sent, bytes",
        [max(_sizes(v, w).get("max_sent", 0) for w in ("setup", "rounds")) for v in vs],
    )
    row("rounds: status writes", [_status(v, "rounds").get("writes", 0) for v in vs])
    row(
        "... of them only `Pinned` changed",
        [_status(v, "rounds").get("pinned_only", 0) for v in vs],
    )
    row("steady RSS after the rounds, MiB", [v["rss"]["steady_mib"] for v in vs], "{:.1f}")
    lines += [
        "",
        "Largest object by kind: "
        + "; ".join(f"{n}: {b[1]}" for n, b in zip(names, big, strict=True))
        + ".",
    ]
    on = r["variants"].get("on")
    if on:
        c = on["census"]
        lines += [
            "",
            f"Revisions at the end (`on`, after the grace): {c['revisions']} exist (most per "
            f"ConfigMap {c['max_per_configmap']}) against keep + named = {c['bound']} "
            f"({c['named']} named by the {c['replicasets']} ReplicaSets, the Deployments and "
            f"{c['pods']} pods); beyond the bound {c['over_bound']}, left to collect "
            f"{c['unnamed_past_keep']}, named and missing {c['referenced_missing']}; at most "
            f"{c['max_owner_references']} owner reference on a revision, "
            f"{c['owned_by_others']} owned by anything else, {c['ownerless']} with none; "
            f"{c['replicasets_pinned']} ReplicaSets and {c['pods_pinned_label']} pods labelled "
            f"`cbop.dev/pinned`, {c['pods_reading_plain']} pinned pods reading a plain ConfigMap.",
        ]
        reasons = {w: _status(on, w).get("pinned_reasons", {}) for w in ("setup", "rounds")}
        lines += [
            "",
            "Status writes that only changed `Pinned` (`on`), by the reason they set: "
            + "; ".join(
                f"{w}: " + (", ".join(f"{k} {n}" for k, n in x.items()) or "none")
                for w, x in reasons.items()
            )
            + ".",
        ]
    lines += ["", "cbop's writes by verb, object and answer:", ""]
    lines += ["| variant | set-up | rounds and after them |", "|---|---|---|"]
    for name, v in r["variants"].items():
        lines.append(f"| {name} | {cells(v['setup']['cbop'])} | {cells(round_writes(v))} |")
    lines += ["", "kube-controller-manager's writes by controller, verb, object and answer:", ""]
    lines += ["| variant | set-up | rounds |", "|---|---|---|"]
    for name, v in r["variants"].items():
        rounds = merge([*(x["kcm"] for x in v["rounds"]), v["after_rounds"].get("kcm", {})])
        lines.append(f"| {name} | {cells_any(v['setup']['kcm'])} | {cells_any(rounds)} |")
    lines += ["", "409 answers to cbop by object (set-up; rounds):", ""]
    for name, v in r["variants"].items():
        parts = [
            ", ".join(f"{k}: {n}" for k, n in _conflicts(v, w).get("by_object", {}).items())
            or "none"
            for w in ("setup", "rounds")
        ]
        examples = _conflicts(v, "setup").get("examples", []) + _conflicts(v, "rounds").get(
            "examples", []
        )
        lines.append(
            f"- {name}: {parts[0]}; {parts[1]}"
            + (f" (runs: {', '.join(examples)})" if examples else "")
        )
    lines += ["", "Per round:", ""]
    lines += [
        "| round | "
        + " | ".join(f"{n}: converge s / complete s / cbop writes" for n in names)
        + " |",
        "|---:|" + "---|" * len(names),
    ]
    for i in range(max(len(v["rounds"]) for v in vs)):
        cols = []
        for v in vs:
            x = v["rounds"][i] if i < len(v["rounds"]) else None
            cols.append(
                f"{x['converge_seconds']:.1f} / {x['complete_seconds']:.1f} / "
                f"{count(total(x['cbop']))}"
                if x
                else "-"
            )
        lines.append(f"| {i + 1} | " + " | ".join(cols) + " |")
    return [*lines, ""]


def cells_any(d: Mapping[str, float]) -> str:
    return ", ".join(f"{k}: {count(v)}" for k, v in sorted(d.items())) or "none"


def goals(results: Mapping[str, Any]) -> list[str]:
    """S12's lines of the Goals section."""
    r = results.get("s12")
    if not r or not {"on", "off"} <= set(r["variants"]):
        return []
    on, off = r["variants"]["on"], r["variants"]["off"]
    twice = sum(_conflicts(on, w).get("retried_more_than_once", 0) for w in ("setup", "rounds"))
    size, what = largest(on)
    return [
        *ratio_goal(
            "S12 cbop writes over the rounds, on / off",
            total(round_writes(on)),
            total(round_writes(off)),
            WRITES_RATIO,
        ),
        *ratio_goal(
            "S12 converge seconds summed over the rounds, on / off",
            converge_seconds(on),
            converge_seconds(off),
            CONVERGE_RATIO,
        ),
        f"- S12 requests answered 409 and retried more than once (on): {twice} — "
        f"{verdict(twice == 0)}",
        f"- S12 largest object cbop wrote (on): {size:,} bytes ({what}), goal <= 16 KiB — "
        f"{verdict(size <= MAX_OBJECT_BYTES)}",
    ]
