"""Ad hoc (run I): a skinny variant at chosen split counts, GB/s and share of a device copy."""
import sys
sys.path.insert(0, ".")
from perf.split_lab import Lab
from perf.bench import Case
from sgblas.dispatch import plan as plans
from sgblas.dispatch.heuristic import Split
from sgblas.kernels.spec import by_name

lab = Lab()
cp = lab.cp
with lab.backend.activated():
    src = cp.random.standard_normal(1 << 28, dtype=cp.float32); dst = cp.empty_like(src)
    t = lab.median_s(lambda a, b, c: cp.copyto(dst, src), [(None, None, None)], 3e-4)
    copy = 2 * src.nbytes / t
    print(f"copy {copy / 1e12:.2f} TB/s", flush=True)
    del src, dst
    for (m, n, k, pair, name, split_list) in [
        (16, 16384, 4096, "NT", "sgemm_skinny_axpy_nt_16x512x32_4s_a16", (1, 2, 4, 6, 8, 12, 16, 24)),
        (16, 16384, 4096, "TT", "sgemm_skinny_axpy_tt_16x512x32_4s_a16", (4, 8, 12, 16)),
        (16, 16384, 4096, "NN", "sgemm_skinny_dot_nn_16x64x128_4s_a16", (1, 2, 3, 4, 8)),
        (16, 16384, 4096, "TN", "sgemm_skinny_dot_tn_16x64x128_4s_a16", (1, 2, 4)),
        (3, 8192, 8192, "NT", "sgemm_skinny_axpy_nt_16x512x32_4s_a16", (8, 16, 24, 32, 48)),
    ]:
        case = Case(m, n, k, pair[0], pair[1], "custom")
        sets = lab.operand_sets(case)
        spec = by_name(name)
        nbytes = 4 * (m * k + k * n + m * n)
        for s in split_list:
            kc = spec.config.KC
            chunk = -(-(-(-k // s)) // kc) * kc
            split = Split(-(-k // chunk), chunk)
            a, b, c = sets[0]
            plan = plans.make_plan(lab.wide, spec, split, m, n, k, int(c.data.ptr), case.ldc)
            def go(a, b, c, plan=plan):
                plans.execute(lab.wide, plan, m, n, k, 1.0, int(a.data.ptr), a.size, case.lda,
                              int(b.data.ptr), b.size, case.ldb, 0.0, int(c.data.ptr), c.size, case.ldc)
            t = lab.median_s(go, sets, nbytes / 3e12)
            print(f"{m}x{n}x{k} {pair} {name} splits={split.splits:>3} chunk={chunk:>5}: {nbytes / t / 1e9:6.0f} GB/s "
                  f"({nbytes / t / copy:.0%} of copy), {t * 1e6:.1f} us", flush=True)
        del sets
        lab.backend.release()
