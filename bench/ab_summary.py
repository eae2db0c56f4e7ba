#!/usr/bin/env python3
"""Summary of alternating A/B ds4-bench runs (bench/compare-dist.sh, bench/compare-tensor-parallel.sh).

Usage: ab_summary.py RESULTS HEADER A_KIND A_LABEL B_KIND B_LABEL
RESULTS: one line per run, "KIND<TAB>CSV row"; HEADER: ds4-bench's CSV header. Prints, for prefill_tps and
gen_tps, each side's median and every run and the ratio of the medians B/A; then every hop* column of B
(the pipeline's per-hop telemetry), its median and every run.
"""
import statistics as st
import sys


def main():
    results, header, a_kind, a_label, b_kind, b_label = sys.argv[1:7]
    rows = [line.rstrip("\n").split("\t", 1) for line in open(results)]
    head = open(header).read().strip().split(",")

    def series(kind, name):
        col = head.index(name)
        return [float(r[1].split(",")[col]) for r in rows if r[0] == kind]

    def runs(values, fmt):
        return ", ".join(format(v, fmt) for v in values)

    for name in ("prefill_tps", "gen_tps"):
        a, b = series(a_kind, name), series(b_kind, name)
        print(f"{name}: {a_label} median {st.median(a):.2f} ({runs(a, '.2f')}); "
              f"{b_label} median {st.median(b):.2f} ({runs(b, '.2f')}); "
              f"ratio {st.median(b) / st.median(a):.3f}x")
    for name in [h for h in head if h.startswith("hop")]:
        v = series(b_kind, name)
        print(f"{name}: median {st.median(v):.3f} ms ({runs(v, '.3f')})")


if __name__ == "__main__":
    main()
