"""Run K's lab tool (not part of sgblas): carry kernel-cache entries from one source tree's key to another's, for the variants whose
compiled input is the same in both trees (generated source, launch bounds, ABI); print the
variants that differ (they need compiling under the new tree).

Usage: python rekey.py OLD_TREE OLD_CACHE NEW_TREE NEW_CACHE PYTHON
"""
import hashlib, json, os, subprocess, sys
from pathlib import Path

DUMP = r'''
import hashlib, json, sys
sys.path.insert(0, ".")
from sgblas.kernels.spec import REGISTRY
from sgblas.kernels import sgemm_simt
from sgblas.runtime import cache
from pathlib import Path
other = hashlib.sha256()
for p in sorted(Path("sgblas/kernels").glob("*.py")):
    if p.name not in ("spec.py", "sgemm_simt.py"):
        other.update(p.name.encode() + p.read_bytes())
out = {}
for s in REGISTRY:
    cfg = getattr(s, "config", None)
    if isinstance(cfg, sgemm_simt.TileConfig):
        text = sgemm_simt.generate_source(cfg, s.name)
    else:
        text = "module:" + other.hexdigest()
    fp = json.dumps([text, list(s.launch_bounds or ()), s.abi.name if hasattr(s.abi, "name") else repr(s.abi), list(s.block)])
    out[s.name] = hashlib.sha256(fp.encode()).hexdigest()
print(json.dumps({"key": cache.source_key(), "fp": out}))
'''

def dump(tree, py):
    r = subprocess.run([py, "-c", DUMP], cwd=tree, capture_output=True, text=True, check=True)
    return json.loads(r.stdout.strip().splitlines()[-1])

old_tree, old_cache, new_tree, new_cache, py = sys.argv[1:6]
old, new = dump(old_tree, py), dump(new_tree, py)
same, differ = [], []
for name, fp in new["fp"].items():
    (same if old["fp"].get(name) == fp else differ).append(name)
Path(new_cache).mkdir(mode=0o700, exist_ok=True)
carried = 0
for name in same:
    src = Path(old_cache) / f"{name}.sm_90.{old['key']}.cubin"
    if not src.exists():
        differ.append(name + " (not in the old cache)"); continue
    header_line, _, cubin = src.read_bytes().partition(b"\n")
    header = json.loads(header_line)
    assert header["sha256"] == hashlib.sha256(cubin).hexdigest()
    header["key"] = new["key"]
    dst = Path(new_cache) / f"{name}.sm_90.{new['key']}.cubin"
    dst.write_bytes(json.dumps(header, sort_keys=True).encode() + b"\n" + cubin)
    os.chmod(dst, 0o600); carried += 1
print(f"old key {old['key']}, new key {new['key']}: carried {carried}; to compile: {differ}")
