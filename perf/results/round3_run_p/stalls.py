"""Run P: summarise an ncu source page (``ncu -i R --page source --csv --print-source sass``):
the warp-stall samples by reason, the instructions executed by opcode, and the shared-memory
wavefronts against their ideal. python stalls.py FILE.csv [more.csv ...]"""
import collections
import csv
import sys

for path in sys.argv[1:]:
    rows = list(csv.reader(open(path)))
    head_i = next(i for i, r in enumerate(rows) if r and r[0] == "Address")
    head = rows[head_i]
    col = {name: i for i, name in enumerate(head)}
    stall_cols = [name for name in head if name.startswith("stall_") or name.endswith("(Not-issued Samples)")]
    by_reason = collections.Counter()
    ops = collections.Counter()
    total = 0
    wf = wf_ideal = 0
    for r in rows[head_i + 1:]:
        if len(r) != len(head):
            continue
        op = r[col["Source"]].strip().split()
        if not op:
            continue
        name = op[1] if op[0].startswith("@") else op[0]
        ops[name.split(".")[0]] += int(r[col["Instructions Executed"]] or 0)
        total += int(r[col["Warp Stall Sampling (All Samples)"]] or 0)
        for c in head:
            if c.startswith("stall_") and not c.endswith("(Not Issued)"):
                by_reason[c[6:]] += int(r[col[c]] or 0)
        wf += int(r[col["L1 Wavefronts Shared"]] or 0)
        wf_ideal += int(r[col["L1 Wavefronts Shared Ideal"]] or 0)
    n = sum(ops.values())
    print(f"{path}: {total} stall samples; {n} warp instructions executed")
    print("  by opcode:", ", ".join(f"{k} {v / n:.1%}" for k, v in ops.most_common(10)))
    print(f"  shared wavefronts {wf} against {wf_ideal} ideal ({wf / max(wf_ideal, 1):.2f}x)")
    t = sum(by_reason.values())
    print("  stalls:", ", ".join(f"{k} {v / t:.1%}" for k, v in by_reason.most_common(9)))
