"""Run V, rung 49: the packed TN row's bank-conflict count (bank_count.py) for every FMA order and
tile-origin view, with and without C staged, linked by this environment's nvJitLink for sm_90.
Needs no GPU. Run from the checkout: CUOBJDUMP=<cuobjdump> python fma_sweep.py OUT_DIR
(cuobjdump needs nvdisasm on PATH or NVDISASM_PATH)."""
import dataclasses
import itertools
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bank_count import count  # noqa: E402

from sgblas.kernels import packed  # noqa: E402
from sgblas.kernels.spec import SIMT_MANIFEST, KernelSpec  # noqa: E402
from sgblas.runtime.build import build_cubin  # noqa: E402

cuobjdump = os.environ.get("CUOBJDUMP", "cuobjdump")
out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
base = dataclasses.replace(packed.packed_manifest(SIMT_MANIFEST)[0], fma="rows", origin_view="", c_stage=False)
for fma, view, staged in itertools.product(("rows", "snake", "snake_t"), ("", "a", "b", "ab"), (True, False)):
    cfg = dataclasses.replace(base, fma=fma, origin_view=view, c_stage=staged)
    _, cubin = build_cubin(packed._packed_spec(KernelSpec, cfg), (9, 0))
    stem = out / f"{fma}_{view or 'none'}_{'cs' if staged else 'nocs'}"
    stem.with_suffix(".cubin").write_bytes(cubin)
    sass = subprocess.run([cuobjdump, "-sass", str(stem.with_suffix(".cubin"))], capture_output=True, text=True,
                          check=True).stdout
    stem.with_suffix(".sass").write_text(sass)
    usage = subprocess.run([cuobjdump, "-res-usage", str(stem.with_suffix(".cubin"))], capture_output=True,
                           text=True, check=True).stdout.strip().splitlines()[-1].split("CONSTANT")[0].strip()
    print(f"{fma:8} {view or '-':3} {'C staged' if staged else 'C direct':9}", *count(str(stem.with_suffix('.sass'))),
          usage, flush=True)
