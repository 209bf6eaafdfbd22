"""Run N probe 2: the skinny axpy loop's schedule without sgblas. A CUDA C kernel (CuPy
RawKernel) that reads 16x16384x4096's large operand L as the axpy loop does (128 threads, each
one 16-byte vector of Q of 4 rows a step, k split S ways), three ways:
* ring: each step's 4 vectors by 16-byte cp.async (cg) into a shared ring of 4 steps, 3 in
  flight, wait_group(3) before a step is used (the axpy loop's scheme);
* ring+fma: the same, with the axpy loop's arithmetic on each step (16 rows of 4 accumulators:
  256 FMAs a step, S's values from shared memory as broadcast 16-byte loads);
* regs+fma: no ring: the next 3 steps' vectors held in registers (loads issued 3 steps ahead),
  the same arithmetic.
Each sums what it reads and writes one float per thread, so nothing is dropped. CUDA events,
median of 20 launches after 3 warm-ups, two buffers alternated (268 MB each); rates as shares
of a device-to-device copy's (read + write) rate in the same run."""
import sys
import cupy as cp
import numpy as np

SRC = r'''
#define RING 4
#define KU 4
#define T 128
__device__ __forceinline__ void cp16(void* smem, const void* g) {
    unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" :: "r"(s), "l"(g));
}
__device__ __forceinline__ void commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void wait3() { asm volatile("cp.async.wait_group 3;\n" ::); }

template <bool FMA>
__device__ void body(const float4* __restrict__ L, long long Q4, int K, int kchunk, float* out) {
    __shared__ float4 ring[RING * KU * T];
    __shared__ float4 S4[64 * 4];   // 64 k rows x 16 values of S
    int tid = threadIdx.x;
    for (int i = tid; i < 64 * 4; i += T) S4[i] = make_float4(1e-3f * i, 2e-3f, -1e-3f, 5e-4f * (i & 7));
    __syncthreads();
    long long q = (long long)blockIdx.x * T + tid;
    int kb = blockIdx.y * kchunk, ke = min(K, kb + kchunk);
    int nsteps = (ke - kb) / KU;   // whole steps only (K and kchunk are multiples of KU here)
    float acc[64];
    #pragma unroll
    for (int i = 0; i < 64; ++i) acc[i] = 0.f;
    float4 sum = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int g = 0; g < RING - 1; ++g) {
        if (g < nsteps)
            for (int u = 0; u < KU; ++u) cp16(&ring[((g % RING) * KU + u) * T + tid], &L[(long long)(kb + g * KU + u) * Q4 + q]);
        commit();
    }
    for (int g = 0; g < nsteps; ++g) {
        int n = g + RING - 1;
        if (n < nsteps)
            for (int u = 0; u < KU; ++u) cp16(&ring[((n % RING) * KU + u) * T + tid], &L[(long long)(kb + n * KU + u) * Q4 + q]);
        commit();
        wait3();
        #pragma unroll
        for (int u = 0; u < KU; ++u) {
            float4 v = ring[((g % RING) * KU + u) * T + tid];
            if (FMA) {
                int srow = ((g * KU + u) & 63) * 4;
                #pragma unroll
                for (int rb = 0; rb < 4; ++rb) {
                    float4 s = S4[srow + rb];
                    float sv[4] = {s.x, s.y, s.z, s.w};
                    #pragma unroll
                    for (int j = 0; j < 4; ++j) {
                        acc[(4 * rb + j) * 4 + 0] += sv[j] * v.x; acc[(4 * rb + j) * 4 + 1] += sv[j] * v.y;
                        acc[(4 * rb + j) * 4 + 2] += sv[j] * v.z; acc[(4 * rb + j) * 4 + 3] += sv[j] * v.w;
                    }
                }
            } else {
                sum.x += v.x; sum.y += v.y; sum.z += v.z; sum.w += v.w;
            }
        }
    }
    asm volatile("cp.async.wait_all;\n" ::);
    float r = sum.x + sum.y + sum.z + sum.w;
    #pragma unroll
    for (int i = 0; i < 64; ++i) r += acc[i];
    out[(long long)blockIdx.y * gridDim.x * T + (long long)blockIdx.x * T + tid] = r;
}
extern "C" __global__ void __launch_bounds__(128, 2) ring_read(const float4* L, long long Q4, int K, int kchunk, float* out) { body<false>(L, Q4, K, kchunk, out); }
extern "C" __global__ void __launch_bounds__(128, 2) ring_fma(const float4* L, long long Q4, int K, int kchunk, float* out) { body<true>(L, Q4, K, kchunk, out); }

extern "C" __global__ void __launch_bounds__(128, 2) regs_fma(const float4* __restrict__ L, long long Q4, int K, int kchunk, float* out) {
    __shared__ float4 S4[64 * 4];
    int tid = threadIdx.x;
    for (int i = tid; i < 64 * 4; i += T) S4[i] = make_float4(1e-3f * i, 2e-3f, -1e-3f, 5e-4f * (i & 7));
    __syncthreads();
    long long q = (long long)blockIdx.x * T + tid;
    int kb = blockIdx.y * kchunk, ke = min(K, kb + kchunk);
    int nsteps = (ke - kb) / KU;
    float acc[64];
    #pragma unroll
    for (int i = 0; i < 64; ++i) acc[i] = 0.f;
    float4 buf[3][KU];
    #pragma unroll
    for (int g = 0; g < 3; ++g)
        #pragma unroll
        for (int u = 0; u < KU; ++u) buf[g][u] = g < nsteps ? L[(long long)(kb + g * KU + u) * Q4 + q] : make_float4(0.f, 0.f, 0.f, 0.f);
    for (int g0 = 0; g0 < nsteps; g0 += 3) {
        #pragma unroll
        for (int d = 0; d < 3; ++d) {
            int g = g0 + d;
            if (g >= nsteps) break;
            float4 cur[KU];
            #pragma unroll
            for (int u = 0; u < KU; ++u) cur[u] = buf[d][u];
            int n = g + 3;
            #pragma unroll
            for (int u = 0; u < KU; ++u) if (n < nsteps) buf[d][u] = L[(long long)(kb + n * KU + u) * Q4 + q];
            #pragma unroll
            for (int u = 0; u < KU; ++u) {
                float4 v = cur[u];
                int srow = ((g * KU + u) & 63) * 4;
                #pragma unroll
                for (int rb = 0; rb < 4; ++rb) {
                    float4 s = S4[srow + rb];
                    float sv[4] = {s.x, s.y, s.z, s.w};
                    #pragma unroll
                    for (int j = 0; j < 4; ++j) {
                        acc[(4 * rb + j) * 4 + 0] += sv[j] * v.x; acc[(4 * rb + j) * 4 + 1] += sv[j] * v.y;
                        acc[(4 * rb + j) * 4 + 2] += sv[j] * v.z; acc[(4 * rb + j) * 4 + 3] += sv[j] * v.w;
                    }
                }
            }
        }
    }
    float r = 0.f;
    #pragma unroll
    for (int i = 0; i < 64; ++i) r += acc[i];
    out[(long long)blockIdx.y * gridDim.x * T + (long long)blockIdx.x * T + tid] = r;
}
'''


def timeit(fn, reps=20):
    for _ in range(3):
        fn(0)
    ev = [(cp.cuda.Event(), cp.cuda.Event()) for _ in range(reps)]
    for i, (a, b) in enumerate(ev):
        a.record(); fn(i); b.record()
    ev[-1][1].synchronize()
    return float(np.median([cp.cuda.get_elapsed_time(a, b) for a, b in ev])) * 1e-3


def main():
    Q, K = 16384, 4096
    mod = cp.RawModule(code=SRC, options=("-std=c++17",), name_expressions=None)
    fns = {n: mod.get_function(n) for n in ("ring_read", "ring_fma", "regs_fma")}
    for n, f in fns.items():
        print(f"{n}: {f.num_regs} registers, {f.local_size_bytes} bytes local", flush=True)
    bufs = [cp.random.standard_normal((K, Q), dtype=cp.float32) for _ in range(2)]
    dst = cp.empty_like(bufs[0])
    out = cp.empty(1 << 24, dtype=cp.float32)
    nbytes = Q * K * 4
    t = timeit(lambda i: cp.cuda.runtime.memcpyAsync(dst.data.ptr, bufs[i % 2].data.ptr, nbytes, 3, 0))
    copy = 2 * nbytes / t
    print(f"copy: {copy / 1e9:.0f} GB/s (read + write)")
    for name in fns:
        for s in (4, 8, 12, 16):
            kchunk = -(-K // s // 4) * 4
            f = fns[name]
            tt = timeit(lambda i: f((Q // 4 // 128, s), (128,), (bufs[i % 2], np.int64(Q // 4), np.int32(K), np.int32(kchunk), out)))
            print(f"{name:10s} S={s:2d}  {nbytes / tt / 1e9:6.0f} GB/s  {nbytes / tt / copy:5.1%} of the copy rate", flush=True)


if __name__ == "__main__":
    main()
