"""Ad hoc: where gemm's host time goes on PyTorch tensors (timeit, us per call)."""
import timeit, torch, sgblas
from sgblas.operands import read_device_span
from sgblas import api as _api
n = 64
a, b, c = (torch.randn(n, n, device="cuda") for _ in range(3))
s = torch.cuda.Stream()
h = sgblas.Handle(stream=s)
sgblas.gemm(a, b, c, handle=h); torch.cuda.synchronize()
def t(label, fn, number=20000):
    for _ in range(3): fn()
    best = min(timeit.repeat(fn, number=number, repeat=5)) / number * 1e6
    print(f"{label:<40} {best:7.3f} us", flush=True)
t("x.dtype", lambda: a.dtype)
t("x.requires_grad", lambda: a.requires_grad)
t("x.is_neg()", lambda: a.is_neg())
t("x.data_ptr()", lambda: a.data_ptr())
t("x.shape", lambda: a.shape)
t("x.stride()", lambda: a.stride())
t("read_device_span(torch)", lambda: read_device_span(a))
sa, sb, sc = read_device_span(a), read_device_span(b), read_device_span(c)
t("launch_plain (spans given)", lambda: _api.launch_plain(h, "T", "T", n, n, n, 1.0, sb, n, sa, n, 0.0, sc, n), 5000)
t("gemm(a, b, c, handle=h)", lambda: sgblas.gemm(a, b, c, handle=h), 5000)
torch.cuda.synchronize()
