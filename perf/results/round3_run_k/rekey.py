"""Run K's lab tool (not part of sgblas): carry kernel-cache entries from one source tree's key
to another's, for the variants whose compiled input is the same in both trees (generated
source, launch bounds, ABI); print the variants that differ (they need compiling under the new
tree). Each tree's own ``sgblas.runtime.cache`` reads and writes the entries, so the files are
what a warm-up in the new tree would store.

Usage: python rekey.py OLD_TREE OLD_CACHE NEW_TREE NEW_CACHE PYTHON
"""
import json
import os
import pickle
import subprocess
import sys
import tempfile
from pathlib import Path

#: Run in a tree: each variant's fingerprint; with argv "read FILE NAMES..." also pickles the
#: entries of NAMES from $SGBLAS_CACHE_DIR to FILE, with "write FILE" stores FILE's entries.
SCRIPT = r'''
import hashlib, json, os, pickle, sys
sys.path.insert(0, ".")
from pathlib import Path
from sgblas.kernels import sgemm_simt
from sgblas.kernels.spec import REGISTRY
from sgblas.runtime import cache
other = hashlib.sha256()
for p in sorted(Path("sgblas/kernels").glob("*.py")):
    if p.name not in ("spec.py", "sgemm_simt.py"):
        other.update(p.name.encode() + p.read_bytes())
fp = {}
for s in REGISTRY:
    cfg = getattr(s, "config", None)
    text = (sgemm_simt.generate_source(cfg, s.name) if isinstance(cfg, sgemm_simt.TileConfig)
            else "module:" + other.hexdigest())
    fp[s.name] = hashlib.sha256(json.dumps([text, list(s.launch_bounds or ()), s.abi.name, list(s.block)]).encode()).hexdigest()
mode = sys.argv[1] if len(sys.argv) > 1 else ""
if mode == "read":
    home = Path(os.environ["SGBLAS_CACHE_DIR"]).resolve()
    entries = {}
    for name in sys.argv[3:]:
        entry = cache.read(name, (9, 0))
        if entry is not None and entry.path is not None and Path(entry.path).resolve().parent == home:
            entries[name] = (entry.entry_name, entry.cubin)
    Path(sys.argv[2]).write_bytes(pickle.dumps(entries))
elif mode == "write":
    for name, (entry_name, cubin) in pickle.loads(Path(sys.argv[2]).read_bytes()).items():
        cache.write(name, (9, 0), entry_name, cubin)
print(json.dumps({"key": cache.source_key(), "fp": fp}))
'''


def run(tree, py, cache_dir, *args):
    env = dict(os.environ, SGBLAS_CACHE_DIR=str(cache_dir))
    r = subprocess.run([py, "-c", SCRIPT, *args], cwd=tree, env=env, capture_output=True, text=True, check=True)
    return json.loads(r.stdout.strip().splitlines()[-1])


old_tree, old_cache, new_tree, new_cache, py = sys.argv[1:6]
old_cache, new_cache = Path(old_cache).resolve(), Path(new_cache).resolve()  # the trees run elsewhere
Path(new_cache).mkdir(mode=0o700, exist_ok=True)
new = run(new_tree, py, new_cache)
with tempfile.TemporaryDirectory() as tmp:
    carry = Path(tmp) / "entries.pickle"
    old = run(old_tree, py, old_cache, "read", str(carry), *new["fp"])
    same = {name for name, fp in new["fp"].items() if old["fp"].get(name) == fp}
    entries = {name: e for name, e in pickle.loads(carry.read_bytes()).items() if name in same}
    carry.write_bytes(pickle.dumps(entries))
    run(new_tree, py, new_cache, "write", str(carry))
differ = [name for name in new["fp"] if name not in same] + [f"{name} (not in the old cache)"
                                                            for name in sorted(same - set(entries))]
print(f"old key {old['key']}, new key {new['key']}: carried {len(entries)}; to compile: {differ}")
