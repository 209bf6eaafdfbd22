"""Run O: TN's two 4-byte rows (4 and 8 lanes a k-major column) over leading dimensions and
offsets, kernel level, against cuBLAS PEDANTIC: ``perf.simt_lab``'s timing on its own cases.
python ld_sweep.py [simt_lab options]; every case is TN with every leading dimension padded by
``pad`` and the pointers offset by ``offs`` elements."""
import sys

from perf import simt_lab

CASES = [(f"ld{s}+{pad}", "TN", m, n, k, pad, offs)
         for s, m, n, k in ((4096, 4096, 4096, 4096),)
         for pad, offs in ((0, (1, 1, 1)), (1, (0, 0, 0)), (2, (0, 0, 0)), (3, (0, 0, 0)), (4, (1, 1, 1)),
                           (5, (0, 0, 0)), (8, (1, 1, 1)), (16, (1, 1, 1)), (32, (1, 1, 1)), (33, (0, 0, 0)),
                           (64, (1, 1, 1)), (128, (1, 1, 1)))]
CASES += [("ld2048+1", "TN", 2048, 2048, 2048, 1, (0, 0, 0)), ("ld8192+1", "TN", 8192, 8192, 8192, 1, (0, 0, 0)),
          ("ld8192+0", "TN", 8192, 8192, 8192, 0, (1, 1, 1)), ("ld6000+1", "TN", 6000, 6000, 6000, 1, (0, 0, 0)),
          ("ld6144+1", "TN", 6144, 6144, 6144, 1, (0, 0, 0)), ("ld3000+1", "TN", 3000, 3000, 3000, 1, (0, 0, 0)),
          ("ld5000+3", "TN", 5000, 5000, 5000, 3, (1, 2, 3)), ("ld8193+2", "TN", 8191, 8190, 8193, 2, (3, 1, 2)),
          ("ld4097+3", "TN", 4097, 4097, 4097, 3, (1, 2, 3))]

simt_lab.cases = lambda args: CASES
sys.exit(simt_lab.main(sys.argv[1:]))
