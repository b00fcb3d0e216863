"""Per-module table of the last mutmut run (run from build/mutation by hack/mutation.sh).

Usage: mutation_report.py [--survivors] [MODULE...]

A mutant is killed when a test failed (or timed out: the planted bug hung the code). Mutants
listed in hack/mutation-equivalent.tsv (name, tab, why) change nothing observable; they are
counted apart and left out of the score. "surviving" is the share of the rest that no test
caught: the figure docs/testing.md holds each module to (at most 10%).
"""

from __future__ import annotations

import json
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
EQUIVALENT = HERE / "mutation-equivalent.tsv"
KILLED = {1, 3, 36, 24, -24, 152, 255}  # test failure, pytest error, timeouts
SURVIVED = 0
NO_TESTS = {5, 33}


def equivalents() -> dict[str, str]:
    """Mutant name -> why it is equivalent."""
    out: dict[str, str] = {}
    for line in EQUIVALENT.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, why = line.partition("\t")
            out[name.strip()] = why.strip()
    return out


def module_of(meta: pathlib.Path) -> str:
    """mutants/src/kvpin/router/ring.py.meta -> router/ring.py"""
    parts = meta.relative_to("mutants/src/kvpin").as_posix()
    return parts.removesuffix(".meta")


def main(argv: list[str]) -> int:
    survivors = "--survivors" in argv
    wanted = {a for a in argv if not a.startswith("--")}
    equivalent = equivalents()
    rows, listed = [], []
    for meta in sorted(pathlib.Path("mutants/src/kvpin").rglob("*.py.meta")):
        module = module_of(meta)
        if wanted and module not in wanted:
            continue
        codes: dict[str, int | None] = json.loads(meta.read_text())["exit_code_by_key"]
        if not codes:
            continue
        killed = sum(c in KILLED for c in codes.values())
        equiv = [n for n, c in codes.items() if c == SURVIVED and n in equivalent]
        alive = [n for n, c in codes.items() if c == SURVIVED and n not in equivalent]
        untested = [n for n, c in codes.items() if c in NO_TESTS]
        other = len(codes) - killed - len(equiv) - len(alive) - len(untested)
        judged = len(codes) - len(equiv) - other
        share = 100 * (len(alive) + len(untested)) / judged if judged else 0.0
        rows.append((module, len(codes), killed, len(equiv), len(alive), len(untested), other,
                     share))  # fmt: skip
        listed += alive + untested
    head = ("module", "mutants", "killed", "equivalent", "survived", "no tests", "other",
            "surviving %")  # fmt: skip
    print("| " + " | ".join(head) + " |")
    print("|" + "|".join("---" if i == 0 else "--:" for i in range(len(head))) + "|")
    for module, *counts, share in rows:
        print(f"| {module} | " + " | ".join(map(str, counts)) + f" | {share:.1f} |")
    if rows:
        total = [sum(r[i] for r in rows) for i in range(1, 7)]
        judged = total[0] - total[2] - total[5]
        share = 100 * (total[3] + total[4]) / judged if judged else 0.0
        print("| **all** | " + " | ".join(map(str, total)) + f" | {share:.1f} |")
    if survivors:
        print("\nSurviving, not marked equivalent (inspect: mutmut show NAME):")
        for name in listed:
            print(" ", name)
    over = [r[0] for r in rows if r[-1] > 10.0]
    if over:
        print(f"\nover 10% surviving: {', '.join(over)}", file=sys.stderr)
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
