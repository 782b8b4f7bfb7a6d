"""Fit labels: every layout the frameworks publish as running (tests/fixtures/fit_labels/), imported as a
user would (benchmarks.evals.published.fit_labels) and priced: the memory model's verdict on plans that ran.

    python -m benchmarks.evals.fit_labels [--all]

Prints the label count by framework and system with the sources, the verdict counts (fits / tight / does not fit /
not expressible) per framework and system, and every label not said to fit: its reserved bytes against the budget,
its largest term (of weights, gradients, optimizer, activations, transient, fragmentation), and
the keys its import names as not priced that change memory (offloading, FP8 parameters, ...): the first place to
look for the mechanism. `--all` prints every label's line. A label is a config, not a step time: nothing here is
compared with a measured time.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter

from benchmarks.evals.published.fit_labels import FIXTURES, read_labels, import_label
from perfmodel.cost.estimate import estimate
from perfmodel.ingest import read_config

GIB = 2.0**30
TERMS = ("weights", "gradients", "optimizer", "activations", "transient", "fragmentation")
# not-priced keys whose reason says the priced memory is overstated or that concern where bytes live
MEMORY_WORDS = re.compile(r"offload|fp8.param|memory is overstated|memory overstated|host memory", re.I)


def verdict_of(label) -> dict:
    """One label priced: verdict, reserved and budget GiB, the terms, the deciding term."""
    if label.reason:
        return {"verdict": "not expressible", "why": label.reason}
    est = estimate(label.model, label.system, label.plan)
    mb = est.memory_bytes
    terms = {t: float(getattr(mb, t)) / GIB for t in TERMS}
    return {"verdict": est.memory_verdict, "reserved": float(mb.reserved) / GIB,
            "budget": float(est.memory_budget_bytes) / GIB, "terms": terms, "decides": max(terms, key=terms.get)}


def memory_keys(entry) -> list[str]:
    """The label's keys the import names as not priced that bear on memory (its ledger, as `import --explain`)."""
    try:
        imp = read_config([str(FIXTURES / f) for f in entry.files], entry.framework, entry.name)
    except Exception:  # noqa: BLE001  (a refusal needing a flag: the label's line already says why)
        return []
    return sorted({f"{k.key} = {k.value[:70]}" for k in imp.keys if k.fate == "not priced" and MEMORY_WORDS.search(
        f"{k.key} {k.why}")})[:6]


def plan_text(label) -> str:
    p = label.plan
    return (f"tp{p.tp} pp{p.pp} vpp{p.vpp} cp{p.cp} ep{p.ep} dp{p.dp} zero{p.zero} {p.precision} {p.recompute} "
            f"mb{p.micro_batch} gb{p.global_batch} s{p.seq_len}" + (f" lora{p.lora.rank}" if p.lora else ""))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--all", action="store_true", help="print every label, not only those not said to fit")
    a = ap.parse_args(argv)
    entries = {e.id: e for e in read_labels()}
    rows = []
    for e in entries.values():
        label = import_label(e)
        rows.append((e, label, verdict_of(label)))
    print(f"{len(rows)} fit labels (tests/fixtures/fit_labels/*.yaml)\n")
    print("labels by framework and system (source groups):")
    for (fw, system), n in sorted(Counter((e.framework, e.system) for e, _, _ in rows).items()):
        groups = sorted({e.group for e, _, _ in rows if (e.framework, e.system) == (fw, system)})
        print(f"  {fw:<10} {system:<14} {n:>4}  {'; '.join(groups)}")
    print("\nverdicts by framework:")
    kinds = ("fits", "tight", "does not fit", "not expressible")
    for fw in sorted({e.framework for e, _, _ in rows}):
        c = Counter(v["verdict"] for e, _, v in rows if e.framework == fw)
        priced = sum(c[k] for k in kinds[:3])
        share = f"  (does not fit: {c['does not fit'] / priced:.1%} of priced)" if priced else ""
        print(f"  {fw:<10} " + "  ".join(f"{k} {c[k]}" for k in kinds) + share)
    c = Counter(v["verdict"] for _, _, v in rows)
    priced = sum(c[k] for k in kinds[:3])
    print(f"  {'all':<10} " + "  ".join(f"{k} {c[k]}" for k in kinds)
          + f"  (does not fit: {c['does not fit'] / priced:.1%} of priced, tight {c['tight'] / priced:.1%})")
    print("\nlabels not said to fit (reserved / budget GiB, largest term, memory keys the import does not price):")
    for e, label, v in rows:
        if v["verdict"] == "fits" and not a.all:
            continue
        if v["verdict"] == "not expressible":
            print(f"  {v['verdict']:<15} {e.id}: {v['why'][-200:]}")
            continue
        terms = " ".join(f"{t[:4]} {x:.1f}" for t, x in v["terms"].items())
        print(f"  {v['verdict']:<15} {e.id} ({e.devices} x {e.system}; {plan_text(label)}): {v['reserved']:.1f} / "
              f"{v['budget']:.1f}; largest: {v['decides']} [{terms}]")
        if v["verdict"] != "fits":
            for k in memory_keys(e):
                print(f"                    not priced: {k}")
            print(f"                    source: {e.source}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
