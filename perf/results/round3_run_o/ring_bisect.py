"""Run O probe: bisect between run N's ring probe (the skinny axpy loop's scheme, which reads
16x16384x4096's large operand at the copy's rate) and sgblas's axpy kernel (59%), adding the
kernel's features to the probe one at a time. A CUDA C kernel (CuPy RawKernel, not sgblas):
128 threads, each one 16-byte vector of Q of 4 k rows a step into a shared ring of 4 steps
(3 in flight), 16 x 4 accumulators, k split S ways. Features (macros):
* LB: the launch bound's CTAs per SM (the probe 2, the kernel 3);
* BAR: a barrier every piece of 8 steps (32 k), after a wait for the piece's S;
* STAGE: S staged a piece at a time by 4-byte cp.async into two shared buffers (implies BAR),
  each piece's copy in the group of the previous piece's first step, as the kernel does;
* EPI: the kernel's epilogue, 64 strided 4-byte stores a thread into an m x n column-major
  partial (ldc = 16) per split; EPIT: the same values through shared memory, stored by 16-byte
  vectors that are contiguous across the CTA (the partial's block of 512 columns is contiguous).
Median of 20 launches after 3 warm-ups, two operand buffers alternated; rates as shares of a
device-to-device copy in the same run. ``--one NAME S`` runs one variant three times (for ncu)."""
import sys
import cupy as cp
import numpy as np

SRC = r'''
#define RING 4
#define KU 4
#define T 128
#define PIECE 8
#ifndef LB
#define LB 2
#endif
#ifndef BAR
#define BAR 0
#endif
#ifndef STAGE
#define STAGE 0
#endif
#ifndef EPI
#define EPI 0
#endif
#ifndef EPIT
#define EPIT 0
#endif
__device__ __forceinline__ void cp16(void* smem, const void* g) {
    unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" :: "r"(s), "l"(g));
}
__device__ __forceinline__ void cp4(void* smem, const void* g) {
    unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" :: "r"(s), "l"(g));
}
__device__ __forceinline__ void commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void wait3() { asm volatile("cp.async.wait_group 3;\n" ::); }

extern "C" __global__ void __launch_bounds__(T, LB)
probe(const float4* __restrict__ L, const float* __restrict__ S, long long Q4, int K, int kchunk, float* out) {
    __shared__ __align__(16) float4 ring[RING * KU * T];
#if STAGE
    __shared__ __align__(16) float Ss[2][PIECE * KU * 16];   // [buffer][k of the piece][p]
#else
    __shared__ float4 S4[64 * 4];   // 64 k rows x 16 values of S
#endif
    int tid = threadIdx.x;
    long long q = (long long)blockIdx.x * T + tid;
    int kb = blockIdx.y * kchunk, ke = min(K, kb + kchunk);
    int nsteps = (ke - kb) / KU;   // whole steps only (K and kchunk are multiples of 32 here)
#if STAGE
    #define STAGE_PIECE(pc, buf) { \
        for (int t = 0; t < PIECE * KU * 16 / T; ++t) { \
            int e = tid + T * t; \
            cp4(&Ss[buf][e], &S[(long long)(kb + (pc) * PIECE * KU + e / 16) * 16 + (e % 16)]); } }
    STAGE_PIECE(0, 0);
    commit();
#else
    for (int i = tid; i < 64 * 4; i += T) S4[i] = make_float4(1e-3f * i, 2e-3f, -1e-3f, 5e-4f * (i & 7));
    __syncthreads();
#endif
    float acc[64];
    #pragma unroll
    for (int i = 0; i < 64; ++i) acc[i] = 0.f;
    for (int g = 0; g < RING - 1; ++g) {
        if (g < nsteps)
            for (int u = 0; u < KU; ++u) cp16(&ring[((g % RING) * KU + u) * T + tid], &L[(long long)(kb + g * KU + u) * Q4 + q]);
        commit();
    }
    for (int g = 0; g < nsteps; ++g) {
        int pc = g / PIECE;
#if BAR || STAGE
        if (g % PIECE == 0) {
            wait3();
            __syncthreads();
#if STAGE
            if ((pc + 1) * PIECE < nsteps) STAGE_PIECE(pc + 1, (pc + 1) & 1);
#endif
        }
#endif
        int n = g + RING - 1;
        if (n < nsteps)
            for (int u = 0; u < KU; ++u) cp16(&ring[((n % RING) * KU + u) * T + tid], &L[(long long)(kb + n * KU + u) * Q4 + q]);
        commit();
        wait3();
        #pragma unroll
        for (int u = 0; u < KU; ++u) {
            float4 v = ring[((g % RING) * KU + u) * T + tid];
            #pragma unroll
            for (int rb = 0; rb < 4; ++rb) {
#if STAGE
                float4 s = *reinterpret_cast<const float4*>(&Ss[pc & 1][((g % PIECE) * KU + u) * 16 + 4 * rb]);
#else
                float4 s = S4[((g * KU + u) & 63) * 4 + rb];
#endif
                float sv[4] = {s.x, s.y, s.z, s.w};
                #pragma unroll
                for (int j = 0; j < 4; ++j) {
                    acc[(4 * rb + j) * 4 + 0] += sv[j] * v.x; acc[(4 * rb + j) * 4 + 1] += sv[j] * v.y;
                    acc[(4 * rb + j) * 4 + 2] += sv[j] * v.z; acc[(4 * rb + j) * 4 + 3] += sv[j] * v.w;
                }
            }
        }
    }
    asm volatile("cp.async.wait_all;\n" ::);
    // the partial of split y: an m x n column-major matrix (m = 16 rows, ldc = 16), n = 4 * Q4
    float* part = out + (long long)blockIdx.y * 16 * (4 * Q4);
#if EPIT
    __syncthreads();   // every thread is done with the ring
    float* st = reinterpret_cast<float*>(ring);
    #pragma unroll
    for (int e = 0; e < 4; ++e)
        #pragma unroll
        for (int p = 0; p < 16; p += 4)
            *reinterpret_cast<float4*>(&st[(tid * 4 + e) * 16 + p]) =
                make_float4(acc[p * 4 + e], acc[(p + 1) * 4 + e], acc[(p + 2) * 4 + e], acc[(p + 3) * 4 + e]);
    __syncthreads();
    float4* dst = reinterpret_cast<float4*>(part + (long long)blockIdx.x * T * 4 * 16);
    #pragma unroll
    for (int i = 0; i < 16; ++i) dst[tid + T * i] = reinterpret_cast<float4*>(st)[tid + T * i];
#elif EPI
    #pragma unroll
    for (int p = 0; p < 16; ++p)
        #pragma unroll
        for (int e = 0; e < 4; ++e)
            part[p + (q * 4 + e) * 16] = acc[p * 4 + e];
#else
    float r = 0.f;
    #pragma unroll
    for (int i = 0; i < 64; ++i) r += acc[i];
    out[(long long)blockIdx.y * gridDim.x * T + (long long)blockIdx.x * T + tid] = r;
#endif
}
'''

VARIANTS = {
    "probe": {},
    "lb3": {"LB": 3},
    "bar": {"BAR": 1},
    "stage": {"STAGE": 1},
    "epi": {"EPI": 1},
    "epit": {"EPIT": 1},
    "lb3+stage": {"LB": 3, "STAGE": 1},
    "kernel-like": {"LB": 3, "STAGE": 1, "EPI": 1},
    "kernel-like, epit": {"LB": 3, "STAGE": 1, "EPIT": 1},
}


def timeit(fn, reps=20):
    for _ in range(3):
        fn(0)
    ev = [(cp.cuda.Event(), cp.cuda.Event()) for _ in range(reps)]
    for i, (a, b) in enumerate(ev):
        a.record(); fn(i); b.record()
    ev[-1][1].synchronize()
    return float(np.median([cp.cuda.get_elapsed_time(a, b) for a, b in ev])) * 1e-3


def build(name):
    opts = ("-std=c++17",) + tuple(f"-D{k}={v}" for k, v in VARIANTS[name].items())
    return cp.RawModule(code=SRC, options=opts).get_function("probe")


def main():
    Q, K = 16384, 4096
    bufs = [cp.random.standard_normal((K, Q), dtype=cp.float32) for _ in range(2)]
    S = cp.random.standard_normal((K, 16), dtype=cp.float32)
    out = cp.empty(64 * 16 * Q, dtype=cp.float32)
    if len(sys.argv) > 1 and sys.argv[1] == "--one":
        f, s = build(sys.argv[2]), int(sys.argv[3])
        for i in range(3):
            f((Q // 4 // 128, s), (128,), (bufs[i % 2], S, np.int64(Q // 4), np.int32(K), np.int32(K // s), out))
        cp.cuda.runtime.deviceSynchronize()
        return
    fns = {n: build(n) for n in VARIANTS}
    for n, f in fns.items():
        print(f"{n}: {f.num_regs} registers, {f.local_size_bytes} bytes local", flush=True)
    dst = cp.empty_like(bufs[0])
    nbytes = Q * K * 4
    t = timeit(lambda i: cp.cuda.runtime.memcpyAsync(dst.data.ptr, bufs[i % 2].data.ptr, nbytes, 3, 0))
    copy = 2 * nbytes / t
    print(f"copy: {copy / 1e9:.0f} GB/s (read + write)")
    for s in (4, 8, 16):
        for name, f in fns.items():
            kchunk = K // s
            tt = timeit(lambda i: f((Q // 4 // 128, s), (128,), (bufs[i % 2], S, np.int64(Q // 4), np.int32(K), np.int32(kchunk), out)))
            print(f"S={s:2d} {name:18s} {nbytes / tt / 1e9:6.0f} GB/s  {nbytes / tt / copy:5.1%} of the copy rate  "
                  f"({tt * 1e6:.1f} us)", flush=True)


if __name__ == "__main__":
    main()
