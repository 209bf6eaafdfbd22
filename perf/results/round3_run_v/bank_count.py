"""Run V: a static count of register-bank conflicts in a kernel's FFMAs, from its SASS.
python bank_count.py KERNEL.sass ...  (the text of ``cuobjdump -sass``)

For each FFMA: its register sources (RZ and immediates aside) that no reuse flag covers, that
is, the previous instruction, also an FFMA, did not mark the same register .reuse in the same
operand slot. Of those, each that shares a bank (register number % 2) with another, different
register among them counts once. Prints (FFMAs, count). Rung 25 in docs/tuning.md tied counts of
this kind to ncu's dispatch stalls; rung 49 uses this one."""
import re
import sys

_INSTR = re.compile(r"/\*([0-9a-f]+)\*/\s+(@!?U?P\d+\s+)?(\w+)(\.[\w.]+)?\s+([^;]*);")
_REG = re.compile(r"-?\|?R(\d+)(\.reuse)?")


def count(path: str) -> tuple[int, int]:
    prev: dict[int, int] = {}
    ffmas = conflicts = 0
    for line in open(path):
        m = _INSTR.search(line)
        if not m:
            continue
        if m.group(3) != "FFMA":
            prev = {}  # the reuse cache serves only the next instruction
            continue
        ffmas += 1
        reused: dict[int, int] = {}
        uncovered: list[int] = []
        for slot, operand in enumerate(a.strip() for a in m.group(5).split(",")[1:4]):
            r = _REG.match(operand)
            if not r:
                continue
            reg = int(r.group(1))
            if r.group(2):
                reused[slot] = reg
            if prev.get(slot) != reg:
                uncovered.append(reg)
        for reg in uncovered:
            if any(other != reg and other % 2 == reg % 2 for other in uncovered):
                conflicts += 1
        prev = reused
    return ffmas, conflicts


if __name__ == "__main__":
    for p in sys.argv[1:]:
        print(p, *count(p))
