"""Run N probe: how fast can the H200 read the large operand of a skinny product in the access
pattern of each skinny loop, with no arithmetic? A read-only CUDA C kernel (CuPy RawKernel),
not sgblas: it separates a DRAM-side cap of the pattern from the kernels' own issue limits.

L is K rows of Q floats (row stride Q), the axpy loop's operand at 16x16384x4096 NT (Q = 16384,
K = 4096). Patterns (each CTA sums what it reads and writes one float, so nothing is dropped):
* axpy W: CTAs of W/4 threads each read a W-float run of every row of their k range (the
  axpy loop reads 512-float runs, 4 rows a step), k split S ways;
* flat: the same bytes read as one contiguous run, grid-stride (what a copy reads).
Each is timed with CUDA events, median of 20 launches after 3 warm-ups, two buffers alternated
(each 268 MB, far above the L2). Prints GB/s and the share of a device-to-device copy of the
same bytes timed the same way (the copy reads and writes, so its rate counts both)."""
import sys
import cupy as cp
import numpy as np

SRC = r'''
extern "C" __global__ void axpy_read(const float4* __restrict__ L, long long Q4, int K, int kchunk,
                                      int unroll_dummy, float* out) {
    long long q = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    int kb = blockIdx.y * kchunk, ke = min(K, kb + kchunk);
    float4 s = make_float4(0.f, 0.f, 0.f, 0.f);
    int k = kb;
    for (; k + 8 <= ke; k += 8) {
        float4 v[8];
        #pragma unroll
        for (int u = 0; u < 8; ++u) v[u] = L[(long long)(k + u) * Q4 + q];
        #pragma unroll
        for (int u = 0; u < 8; ++u) { s.x += v[u].x; s.y += v[u].y; s.z += v[u].z; s.w += v[u].w; }
    }
    for (; k < ke; ++k) { float4 v = L[(long long)k * Q4 + q]; s.x += v.x; s.y += v.y; s.z += v.z; s.w += v.w; }
    out[(long long)blockIdx.y * gridDim.x * blockDim.x + (long long)blockIdx.x * blockDim.x + threadIdx.x] = s.x + s.y + s.z + s.w;
}
extern "C" __global__ void flat_read(const float4* __restrict__ L, long long n4, float* out) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x, st = (long long)gridDim.x * blockDim.x;
    float4 s = make_float4(0.f, 0.f, 0.f, 0.f);
    for (; i + 3 * st < n4; i += 4 * st) {
        float4 a = L[i], b = L[i + st], c = L[i + 2 * st], d = L[i + 3 * st];
        s.x += a.x + b.x + c.x + d.x; s.y += a.y + b.y + c.y + d.y; s.z += a.z + b.z + c.z + d.z; s.w += a.w + b.w + c.w + d.w;
    }
    for (; i < n4; i += st) { float4 a = L[i]; s.x += a.x; s.y += a.y; s.z += a.z; s.w += a.w; }
    out[(long long)blockIdx.x * blockDim.x + threadIdx.x] = s.x + s.y + s.z + s.w;
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
    mod = cp.RawModule(code=SRC)
    axpy, flat = mod.get_function("axpy_read"), mod.get_function("flat_read")
    bufs = [cp.random.standard_normal((K, Q), dtype=cp.float32) for _ in range(2)]
    dst = cp.empty_like(bufs[0])
    out = cp.empty(1 << 24, dtype=cp.float32)
    nbytes = Q * K * 4
    t = timeit(lambda i: cp.cuda.runtime.memcpyAsync(dst.data.ptr, bufs[i % 2].data.ptr, nbytes, 3, 0))
    copy = 2 * nbytes / t
    print(f"copy: {copy / 1e9:.0f} GB/s (read + write)")
    for name, fn in [("flat, 132x4 CTAs of 256", lambda i: flat((132 * 4,), (256,), (bufs[i % 2], np.int64(Q * K // 4), out))),
                     ("flat, 132x8 CTAs of 256", lambda i: flat((132 * 8,), (256,), (bufs[i % 2], np.int64(Q * K // 4), out)))] + [
            (f"axpy W={w} S={s}", (lambda w, s: lambda i: axpy((Q // w, s), (w // 4,), (bufs[i % 2], np.int64(Q // 4), np.int32(K), np.int32(-(-K // s)), np.int32(0), out)))(w, s))
            for w in (512, 1024, 2048) for s in (4, 8, 16, 32)]:
        t = timeit(fn)
        print(f"{name:28s} {nbytes / t / 1e9:6.0f} GB/s  {nbytes / t / copy:5.1%} of the copy rate")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
