"""sgblas's cubin cache: search path, entry format, integrity, trust, unwritable locations,
logging, and real compiles without a GPU.

Every test gets its own ``$SGBLAS_CACHE_DIR`` ("system") and per-user cache ("user", through
``$NUMBA_CACHE_DIR``) under pytest's temporary directory. The suite runs as root on CI, and
root writes through any permission bits, so an unwritable directory is emulated by making the
write itself fail there (``tempfile.mkstemp`` raising PermissionError, or ``os.access`` saying
no), or by a path under a regular file, which nobody can create.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from sgblas.runtime import build
from sgblas.runtime import cache as kernel_cache

CUBIN = b"\x7fELF" + bytes(range(256)) * 3 + b"\n\n"
KEY = "0123456789abcdef01234567"
REAL_COMPILE_ENV = {"NUMBA_ENABLE_CUDASIM": "0"}


@pytest.fixture(autouse=True)
def locations(tmp_path, monkeypatch):
    """The two locations of the search path, neither created yet, and no warning heard yet."""
    system = tmp_path / "system"
    user = tmp_path / "numba" / "sgblas"
    monkeypatch.setenv(kernel_cache.CACHE_DIR_VARIABLE, str(system))
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "numba"))
    monkeypatch.setattr(kernel_cache, "_warned", set())
    return SimpleNamespace(system=system, user=user)


@pytest.fixture
def cache(locations):
    locations.system.mkdir(mode=0o700)
    return locations.system


def refuse_writes_in(monkeypatch, *directories: Path) -> None:
    """Make creating a file in ``directories`` fail as it does for a user without write
    permission (root's writes would otherwise succeed whatever the mode)."""
    refused = {os.path.realpath(d) for d in directories}
    real_mkstemp = tempfile.mkstemp

    def mkstemp(*args, **kwargs):
        where = kwargs.get("dir")
        if where is not None and os.path.realpath(where) in refused:
            raise PermissionError(13, "Permission denied", str(where))
        return real_mkstemp(*args, **kwargs)

    monkeypatch.setattr(tempfile, "mkstemp", mkstemp)


def warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "sgblas" and r.levelno == logging.WARNING]


# -- search path and entries ----------------------------------------------------------------


def test_search_path_is_the_explicit_directory_then_the_per_user_cache(tmp_path, monkeypatch):
    for variable in (kernel_cache.CACHE_DIR_VARIABLE, "NUMBA_CACHE_DIR", "XDG_CACHE_HOME"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert [loc.path for loc in kernel_cache.search_path()] == [tmp_path / "home" / ".cache" / "sgblas"]
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert [loc.path for loc in kernel_cache.search_path()] == [tmp_path / "xdg" / "sgblas"]
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "numba"))
    assert [loc.path for loc in kernel_cache.search_path()] == [tmp_path / "numba" / "sgblas"]
    monkeypatch.setenv(kernel_cache.CACHE_DIR_VARIABLE, str(tmp_path / "site"))
    path = kernel_cache.search_path()
    assert [loc.path for loc in path] == [tmp_path / "site", tmp_path / "numba" / "sgblas"]
    assert str(path[0]) == f"{tmp_path / 'site'} ($SGBLAS_CACHE_DIR)"
    monkeypatch.setenv(kernel_cache.CACHE_DIR_VARIABLE, str(tmp_path / "numba" / "sgblas"))
    assert len(kernel_cache.search_path()) == 1  # the same directory is not searched twice


def test_round_trip_and_key_in_the_name(cache):
    path = kernel_cache.write("sgemm_x", (9, 0), KEY, "_Z6kernel", CUBIN)
    assert path.parent == cache and path.name == f"sgemm_x.sm_90.{KEY}.cubin"
    assert kernel_cache.read("sgemm_x", (9, 0), KEY) == kernel_cache.CacheEntry("_Z6kernel", CUBIN, path)
    assert kernel_cache.read("sgemm_x", (8, 0), KEY) is None  # another compute capability misses
    assert kernel_cache.read("sgemm_y", (9, 0), KEY) is None
    assert kernel_cache.read("sgemm_x", (9, 0), KEY[::-1]) is None  # another key misses
    assert kernel_cache.read("sgemm_x", (9, 0), KEY, kind="ptx") is None  # and another kind
    ptx = kernel_cache.write("sgemm_x", (9, 0), KEY, "_Z6kernel", b"// PTX", kind="ptx")
    assert ptx.name == f"sgemm_x.sm_90.{KEY}.ptx"
    assert kernel_cache.read("sgemm_x", (9, 0), KEY, kind="ptx") == kernel_cache.CacheEntry("_Z6kernel", b"// PTX", ptx)
    assert kernel_cache.read("sgemm_x", (9, 0), KEY).cubin == CUBIN
    assert stat.S_IMODE(path.stat().st_mode) == 0o644  # readable wherever its directory is
    assert not [p for p in cache.iterdir() if p.name.endswith(".tmp")]


def test_keys_and_kinds_are_checked():
    with pytest.raises(ValueError, match="kind='sass' is not one of"):
        kernel_cache.entry_file_name("sgemm_x", (9, 0), KEY, "sass")
    with pytest.raises(ValueError, match="key='../x' is not a non-empty alphanumeric string"):
        kernel_cache.entry_file_name("sgemm_x", (9, 0), "../x")


@pytest.mark.parametrize("damage", ["flip a cubin byte", "truncate", "header only", "bad json", "wrong key",
                                    "wrong kind"])
def test_damaged_entries_are_misses(cache, damage):
    path = kernel_cache.write("sgemm_x", (9, 0), KEY, "_Z6kernel", b"\x7fELF" + b"x" * 100)
    data = path.read_bytes()
    header, _, body = data.partition(b"\n")
    if damage == "flip a cubin byte":
        data = header + b"\n" + body[:-1] + b"y"
    elif damage == "truncate":
        data = data[:-10]
    elif damage == "header only":
        data = header
    elif damage == "bad json":
        data = b"{" + data
    else:
        fields = json.loads(header)
        if damage == "wrong key":
            fields["key"] = "0" * 24
        else:
            fields["kind"] = "ptx"
        data = json.dumps(fields).encode() + b"\n" + body
    path.write_bytes(data)
    assert kernel_cache.read("sgemm_x", (9, 0), KEY) is None


def test_a_damaged_entry_in_the_first_location_does_not_hide_a_good_one_later(locations, cache):
    kernel_cache.write("sgemm_x", (9, 0), KEY, "_Z6kernel", CUBIN)
    (cache / kernel_cache.entry_file_name("sgemm_x", (9, 0), KEY)).write_bytes(b"{}\n")
    locations.user.mkdir(parents=True)
    good = kernel_cache._write_into(locations.user, "sgemm_x", (9, 0), KEY, "cubin", "_Z6kernel", CUBIN)
    assert kernel_cache.read("sgemm_x", (9, 0), KEY).path == good


# -- trust ----------------------------------------------------------------------------------


def test_new_directories_are_private(tmp_path, monkeypatch):
    monkeypatch.setenv(kernel_cache.CACHE_DIR_VARIABLE, str(tmp_path / "a" / "b" / "c"))
    old = os.umask(0)  # even with no umask at all, nothing is created writable by others
    try:
        path = kernel_cache.write("sgemm_x", (9, 0), KEY, "_Z6kernel", CUBIN)
    finally:
        os.umask(old)
    for directory in (tmp_path / "a", tmp_path / "a" / "b", tmp_path / "a" / "b" / "c"):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700, directory
    assert path.parent == tmp_path / "a" / "b" / "c"


def test_an_existing_directory_keeps_its_mode(cache):
    os.chmod(cache, 0o755)  # an administrator's cache meant for everyone
    kernel_cache.write("sgemm_x", (9, 0), KEY, "_Z6kernel", CUBIN)
    assert stat.S_IMODE(cache.stat().st_mode) == 0o755


@pytest.mark.parametrize("mode, who", [(0o777, "its group and others"), (0o775, "its group"),
                                       (0o1777, "its group and others")])
def test_a_cache_directory_others_can_write_is_not_used(locations, cache, caplog, mode, who):
    planted = kernel_cache.write("sgemm_x", (9, 0), KEY, "_Z6planted", CUBIN)  # valid in every way but trust
    os.chmod(cache, mode)
    assert kernel_cache.read("sgemm_x", (9, 0), KEY) is None
    assert kernel_cache.read("sgemm_y", (9, 0), KEY) is None
    (message,) = warnings(caplog)  # once per location, however often it is read
    assert str(cache) in message and f"writable by {who} (mode {mode:04o})" in message
    assert "$SGBLAS_CACHE_DIR" in message and "neither loaded nor written" in message
    # New entries go to the per-user cache, and the planted one is still not read.
    path = kernel_cache.write("sgemm_x", (9, 0), KEY, "_Z6kernel", CUBIN)
    assert path.parent == locations.user and path != planted
    assert kernel_cache.read("sgemm_x", (9, 0), KEY).entry_name == "_Z6kernel"
    assert len(warnings(caplog)) == 1


@pytest.mark.parametrize("mode", [0o666, 0o646, 0o664])
def test_an_entry_others_can_write_is_not_loaded(cache, caplog, mode):
    path = kernel_cache.write("sgemm_x", (9, 0), KEY, "_Z6kernel", CUBIN)
    os.chmod(path, mode)
    assert kernel_cache.read("sgemm_x", (9, 0), KEY) is None
    (message,) = warnings(caplog)
    assert str(path) in message and f"(mode {mode:04o})" in message


def test_an_entry_owned_by_another_user_is_not_loaded(cache, caplog):
    path = kernel_cache.write("sgemm_x", (9, 0), KEY, "_Z6kernel", CUBIN)
    os.chown(path, 4242, 4242)
    assert kernel_cache.read("sgemm_x", (9, 0), KEY) is None
    assert "owned by user 4242" in warnings(caplog)[0]


def test_a_symlinked_entry_is_not_loaded(tmp_path, cache, caplog):
    # Even a link to a valid entry: what it points to can change after any check.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    target = kernel_cache._write_into(elsewhere, "sgemm_x", (9, 0), KEY, "cubin", "_Z6kernel", CUBIN)
    os.symlink(target, cache / target.name)
    assert kernel_cache.read("sgemm_x", (9, 0), KEY) is None
    (message,) = warnings(caplog)
    assert "symbolic link" in message and str(cache / target.name) in message


def test_a_cache_directory_owned_by_another_user_is_not_used(cache, caplog, monkeypatch):
    kernel_cache.write("sgemm_x", (9, 0), KEY, "_Z6kernel", CUBIN)
    os.chown(cache, 4242, 4242)
    assert kernel_cache.read("sgemm_x", (9, 0), KEY) is None
    (message,) = warnings(caplog)
    assert f"{cache} is owned by user 4242" in message
    assert ", not root" in message if os.getuid() == 0 else "nor root" in message
    # Ownership, not the uid number, is what counts: as user 4242 the directory is its own.
    monkeypatch.setattr(os, "getuid", lambda: 4242)
    monkeypatch.setattr(kernel_cache, "_warned", set())
    assert kernel_cache.untrusted_reason(cache) is None


def test_a_directory_above_the_cache_that_others_can_write_needs_the_sticky_bit(tmp_path, monkeypatch, caplog):
    shared = tmp_path / "shared"
    shared.mkdir()
    cache = shared / "mine"
    cache.mkdir(mode=0o700)
    monkeypatch.setenv(kernel_cache.CACHE_DIR_VARIABLE, str(cache))
    kernel_cache.write("sgemm_x", (9, 0), KEY, "_Z6kernel", CUBIN)
    os.chmod(shared, 0o1777)  # like /tmp: others cannot rename or remove "mine"
    assert kernel_cache.read("sgemm_x", (9, 0), KEY) is not None
    os.chmod(shared, 0o777)  # others could rename "mine" away and put their own in its place
    assert kernel_cache.read("sgemm_x", (9, 0), KEY) is None
    assert f"{shared} is writable by its group and others (mode 0777)" in warnings(caplog)[0]
    os.chmod(shared, 0o1777)
    os.chown(shared, 4242, 4242)  # the owner of a sticky directory may still remove anything in it
    monkeypatch.setattr(kernel_cache, "_warned", set())
    assert kernel_cache.read("sgemm_x", (9, 0), KEY) is None
    assert f"{shared} is owned by user 4242" in warnings(caplog)[-1]


def test_a_symlinked_cache_directory_is_judged_and_used_by_its_target(tmp_path, monkeypatch, caplog):
    target = tmp_path / "target"
    target.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(target)
    monkeypatch.setenv(kernel_cache.CACHE_DIR_VARIABLE, str(link))
    path = kernel_cache.write("sgemm_x", (9, 0), KEY, "_Z6kernel", CUBIN)
    assert path.parent == target  # the resolved directory, so a later change of the link is not followed
    assert kernel_cache.read("sgemm_x", (9, 0), KEY).path == path
    os.chmod(target, 0o777)
    assert kernel_cache.read("sgemm_x", (9, 0), KEY) is None
    assert f"{target} is writable by its group and others" in warnings(caplog)[0]


def test_a_cache_another_user_created_first_in_a_shared_directory_is_not_used(tmp_path, monkeypatch, caplog):
    # NUMBA_CACHE_DIR in a shared place such as /tmp: someone else made the sgblas directory
    # first (and left it looking harmless), planting an entry in it.
    shared = tmp_path / "tmp"
    shared.mkdir(mode=0o1777)
    monkeypatch.delenv(kernel_cache.CACHE_DIR_VARIABLE)
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(shared / "numba"))
    (shared / "numba").mkdir(mode=0o755)
    planted = kernel_cache.write("sgemm_x", (9, 0), KEY, "_Z6planted", CUBIN)
    for path in (shared / "numba", shared / "numba" / "sgblas", planted):
        os.chown(path, 4242, 4242)
    assert kernel_cache.read("sgemm_x", (9, 0), KEY) is None
    assert f"{shared / 'numba' / 'sgblas'} is owned by user 4242" in warnings(caplog)[0]
    with pytest.raises(kernel_cache.CacheNotWritableError, match="not trusted"):
        kernel_cache.write("sgemm_x", (9, 0), KEY, "_Z6kernel", CUBIN)


# -- unwritable locations -------------------------------------------------------------------


def test_an_unwritable_system_cache_is_read_and_new_entries_go_to_the_user_cache(locations, cache, monkeypatch,
                                                                                  caplog):
    system_entry = kernel_cache.write("sgemm_x", (9, 0), KEY, "_Z6kernel", CUBIN)
    os.chmod(cache, 0o555)
    refuse_writes_in(monkeypatch, cache)
    assert kernel_cache.read("sgemm_x", (9, 0), KEY).path == system_entry
    assert kernel_cache.writable_location() == locations.user
    path = kernel_cache.write("sgemm_y", (9, 0), KEY, "_Z6other", CUBIN)
    assert path.parent == locations.user
    assert stat.S_IMODE(locations.user.stat().st_mode) == 0o700
    kernel_cache.write("sgemm_z", (9, 0), KEY, "_Z6third", CUBIN)
    (message,) = warnings(caplog)  # once for the location, not once per entry
    assert f"cannot store compiled kernels in the kernel cache {cache} ($SGBLAS_CACHE_DIR)" in message
    assert "Permission denied" in message and f"stored in {locations.user} (the per-user cache) instead" in message
    assert kernel_cache.read("sgemm_y", (9, 0), KEY).path == path


def test_os_access_refusing_is_enough_to_skip_a_location(locations, cache, monkeypatch, caplog):
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode, **kw: False if Path(path) == cache
                        else real_access(path, mode, **kw))
    assert kernel_cache.write("sgemm_x", (9, 0), KEY, "_Z6kernel", CUBIN).parent == locations.user
    (message,) = warnings(caplog)
    assert "is not writable by this process's user" in message and "mode 0700" in message


def test_with_no_writable_location_store_keeps_the_entry_in_memory(locations, cache, monkeypatch, caplog):
    locations.user.mkdir(parents=True)
    refuse_writes_in(monkeypatch, cache, locations.user)
    with pytest.raises(kernel_cache.CacheNotWritableError) as raised:
        kernel_cache.write("sgemm_x", (9, 0), KEY, "_Z6kernel", CUBIN)
    assert str(cache) in str(raised.value) and str(locations.user) in str(raised.value)
    assert [loc.path for loc, _ in raised.value.problems] == [cache, locations.user]
    with pytest.raises(kernel_cache.CacheNotWritableError):
        kernel_cache.writable_location()
    entry = kernel_cache.store("sgemm_x", (9, 0), KEY, "_Z6kernel", CUBIN)
    assert entry == kernel_cache.CacheEntry("_Z6kernel", CUBIN, None)
    kernel_cache.store("sgemm_y", (9, 0), KEY, "_Z6kernel", CUBIN)
    (message,) = warnings(caplog)
    assert "could not store compiled kernels anywhere" in message and "kept in memory" in message
    assert str(cache) in message and str(locations.user) in message and "SGBLAS_CACHE_DIR" in message
    assert kernel_cache.read("sgemm_x", (9, 0), KEY) is None
    assert not any(cache.iterdir()) and not any(locations.user.iterdir())


def test_a_location_that_cannot_be_created_is_skipped(tmp_path, locations, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv(kernel_cache.CACHE_DIR_VARIABLE, str(blocker / "cache"))  # even root cannot
    assert kernel_cache.write("sgemm_x", (9, 0), KEY, "_Z6kernel", CUBIN).parent == locations.user
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(blocker / "numba"))
    with pytest.raises(kernel_cache.CacheNotWritableError, match="cannot be created"):
        kernel_cache.writable_location()


def test_a_cache_path_that_is_a_file_is_skipped(tmp_path, locations, monkeypatch, caplog):
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv(kernel_cache.CACHE_DIR_VARIABLE, str(tmp_path / "a-file"))
    assert kernel_cache.read("sgemm_x", (9, 0), KEY) is None
    assert kernel_cache.write("sgemm_x", (9, 0), KEY, "_Z6kernel", CUBIN).parent == locations.user
    (message,) = warnings(caplog)
    assert f"it cannot be used (Not a directory: {tmp_path / 'a-file'})" in message


# -- fill_cache -----------------------------------------------------------------------------


def FakeSpec(name: str, text: str = "") -> SimpleNamespace:
    """What fill_cache needs of a variant when compiling is replaced: its name, the least
    compute capability it runs on (it builds only those a device of ``cc`` can run), and what
    its key is made of."""
    return SimpleNamespace(name=name, min_cc=(5, 0), abi=SimpleNamespace(name="GEMM", params=()),
                           launch_bounds=None, code=lambda cc: (f"def {name}():\n    pass  # {text}\n",))


def cubin_of(spec, cc) -> kernel_cache.CacheEntry | None:
    return kernel_cache.read(spec.name, cc, build.cubin_key(build.variant_key(spec, cc)))


@pytest.fixture
def fake_compiler(monkeypatch):
    """Compiling without Numba: each variant's PTX and cubin name it. Records what it compiled."""
    compiled = []

    def compile_ptx(spec, cc):
        compiled.append(spec.name)
        return f".visible .entry _Z{spec.name}(\n"

    monkeypatch.setattr(build, "compile_ptx", compile_ptx)
    monkeypatch.setattr(build, "link_ptx", lambda spec, ptx, cc, device=None: CUBIN + spec.name.encode())
    return compiled


def test_keys_follow_the_code_not_its_comments():
    base = FakeSpec("v0")
    key = build.variant_key(base, (9, 0))
    assert len(key) == 24 and key == build.variant_key(FakeSpec("v0", "another comment"), (9, 0))
    assert build.variant_key(base, (8, 0)) != key
    assert build.variant_key(FakeSpec("v1"), (9, 0)) != key
    changed = SimpleNamespace(**{**vars(base), "code": lambda cc: ("def v0():\n    return 1\n",)})
    assert build.variant_key(changed, (9, 0)) != key
    bounded = SimpleNamespace(**{**vars(base), "launch_bounds": (128, 2)})
    assert build.variant_key(bounded, (9, 0)) != key
    assert build.cubin_key(key) != key and len(build.cubin_key(key)) == 24


def test_a_module_enters_a_key_by_its_syntax(tmp_path):
    module = tmp_path / "kernel_module.py"
    spec = SimpleNamespace(**{**vars(FakeSpec("v0")), "code": lambda cc: (build.ModuleCode(str(module)),)})
    keys = []
    for text in ('"""Doc."""\nx = 1\n', '"""Other doc."""\n# a comment\nx = 1  # here too\n\n',
                 'x = 2\n'):
        module.write_text(text)
        os.utime(module, ns=(len(keys) * 10**9, len(keys) * 10**9))  # a new stamp, as an edit gives
        keys.append(build.variant_key(spec, (9, 0)))
    assert keys[0] == keys[1] != keys[2]
    only = SimpleNamespace(**{**vars(spec), "code": lambda cc: (build.ModuleCode(str(module), ("f",)),)})
    module.write_text("def f():\n    return 1\n\ndef g():\n    return 2\n")
    os.utime(module, ns=(10**10, 10**10))
    first = build.variant_key(only, (9, 0))
    module.write_text("def f():\n    return 1\n\ndef g():\n    return 3\n")
    os.utime(module, ns=(2 * 10**10, 2 * 10**10))
    assert build.variant_key(only, (9, 0)) == first  # g is not what the kernel calls


def test_every_registry_row_has_a_distinct_key():
    from sgblas.kernels.spec import REGISTRY

    keys = {build.variant_key(spec, (9, 0)) for spec in REGISTRY}
    assert len(keys) == len(REGISTRY)


def test_fill_cache_with_no_writable_location_compiles_in_process_and_keeps_cubins(
        locations, cache, monkeypatch, caplog, fake_compiler):
    v0, v1, v2 = FakeSpec("v0"), FakeSpec("v1"), FakeSpec("v2")
    kernel_cache.write("v0", (8, 0), build.cubin_key(build.variant_key(v0, (8, 0))), "_Zv0", CUBIN + b"v0")
    locations.user.mkdir(parents=True)
    refuse_writes_in(monkeypatch, cache, locations.user)

    def no_workers(*args, **kwargs):
        raise AssertionError("workers hand cubins over through the cache, which cannot be written")

    monkeypatch.setattr(build, "_in_workers", no_workers)
    caplog.set_level(logging.INFO, logger="sgblas")
    heard = []
    filled = build.fill_cache([v0, v1, v2], (8, 0), progress=heard.append, announce=logging.INFO)
    assert filled["v0"][1] == "cache" and filled["v0"][0].path is not None
    for name in ("v1", "v2"):
        entry, source = filled[name]
        assert source == "compiled, not stored" and entry == kernel_cache.CacheEntry(f"_Z{name}", CUBIN + name.encode())
    assert fake_compiler == ["v1", "v2"] and [r.name for r in heard] == ["v1", "v2"]
    infos = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert "compiling 2 kernel variants for compute capability 8.0 (missing from its kernel cache)" in infos[0]
    low, high = (2 * t for t in build.SECONDS_PER_VARIANT)
    assert f"about {low:.0f}-{high:.0f} s (one at a time in this process)" in infos[0]
    assert "python -m sgblas.warmup" in infos[0]
    assert "made 2 kernel variants for compute capability 8.0 ready in" in infos[1]
    assert "kept in memory only" in infos[1]
    assert len(warnings(caplog)) == 1  # the store warning, once for both


def test_a_library_call_that_compiles_says_so_at_warning(cache, caplog, fake_compiler, monkeypatch):
    monkeypatch.setattr(build, "_in_workers", lambda *args, **kwargs: {})  # the parent compiles them
    caplog.set_level(logging.WARNING, logger="sgblas")
    build.fill_cache([FakeSpec("v0"), FakeSpec("v1")], (9, 0))
    said = warnings(caplog)
    assert len(said) == 2 and "compiling 2 kernel variants" in said[0] and "python -m sgblas.warmup" in said[0]
    assert "made 2 kernel variants for compute capability 9.0 ready" in said[1]


def test_fill_cache_uses_workers_when_a_location_can_be_written(locations, cache, monkeypatch, caplog,
                                                                fake_compiler):
    specs = [FakeSpec("v0"), FakeSpec("v1", "x" * 500), FakeSpec("v2")]
    seen = []

    def workers(jobs, cc, destination, rebuild, progress):  # the last job's worker fails
        seen.extend(spec.name for spec, _ in jobs)
        assert destination == cache
        done = {}
        for spec, ckey in jobs[:-1]:
            kernel_cache.write(spec.name, cc, ckey, f"_Z{spec.name}", CUBIN + spec.name.encode())
            done[spec.name] = "compiled in a worker"
        return done

    monkeypatch.setattr(build, "_in_workers", workers)
    monkeypatch.setattr(build.claims, "cpu_count", lambda: 2)
    caplog.set_level(logging.INFO, logger="sgblas")
    filled = build.fill_cache(specs, (9, 0), announce=logging.INFO)
    assert seen[0] == "v1"  # the most code first
    assert {name: source for name, (_, source) in filled.items()} == {
        seen[0]: "compiled in a worker", seen[1]: "compiled in a worker", seen[2]: "compiled"}
    assert all(entry.path.parent == cache for entry, _ in filled.values())
    assert fake_compiler == [seen[2]]
    infos = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert "compiling 3 kernel variants for compute capability 9.0" in infos[0]
    low, high = (2 * t for t in build.SECONDS_PER_VARIANT)  # 3 variants on 2 CPUs: two waves
    assert f"about {low:.0f}-{high:.0f} s (up to 2 worker processes at once on 2 CPUs)" in infos[0]
    assert f"stored in {cache}" in infos[1]
    assert not warnings(caplog)
    assert cubin_of(specs[0], (9, 0)) is not None


def test_the_costliest_compile_goes_first(cache, monkeypatch, fake_compiler):
    """Measured seconds order the jobs (a row never measured first), the code's size breaks ties."""
    specs = [SimpleNamespace(**vars(FakeSpec(name, "x" * size)), compile_seconds=seconds)
             for name, size, seconds in (("quick", 900, 1.0), ("slow", 0, 9.0), ("new", 0, None), ("tie", 50, 1.0))]
    seen = []
    monkeypatch.setattr(build, "_in_workers", lambda jobs, *args: seen.extend(spec.name for spec, _ in jobs) or {})
    build.fill_cache(specs, (9, 0))
    assert seen == ["new", "slow", "quick", "tie"]


def test_fill_cache_says_nothing_when_everything_is_cached(cache, caplog, fake_compiler):
    specs = [FakeSpec("v0"), FakeSpec("v1")]
    for spec in specs:
        kernel_cache.write(spec.name, (9, 0), build.cubin_key(build.variant_key(spec, (9, 0))), f"_Z{spec.name}", CUBIN)
    caplog.set_level(logging.DEBUG, logger="sgblas")
    filled = build.fill_cache(specs, (9, 0))
    assert {source for _, source in filled.values()} == {"cache"} and not fake_compiler
    assert not caplog.records


def test_a_job_links_kept_ptx_without_compiling(cache, fake_compiler):
    spec = FakeSpec("v0")
    assert build.compile_job(spec, (9, 0)).source == "compiled" and fake_compiler == ["v0"]
    assert build.compile_job(spec, (9, 0)).source == "cache"
    os.unlink(cubin_of(spec, (9, 0)).path)  # as a new linker's key would miss it
    assert build.compile_job(spec, (9, 0)).source == "linked" and fake_compiler == ["v0"]
    assert build.compile_job(spec, (9, 0), rebuild=True).source == "compiled" and fake_compiler == ["v0", "v0"]
    assert cubin_of(spec, (9, 0)).cubin == CUBIN + b"v0"


def test_expected_seconds():
    low, high = build.SECONDS_PER_VARIANT
    assert build.expected_seconds(7, 16) == (low, high)  # one wave of workers
    assert build.expected_seconds(7, 2) == (4 * low, 4 * high)
    assert build.expected_seconds(7, 1) == (7 * low, 7 * high)


def test_the_library_configures_no_logging_handlers():
    import sgblas  # noqa: F401

    assert logging.getLogger("sgblas").handlers == []


# -- real compiles (no GPU: nvJitLink links) ------------------------------------------------


def _flags_sm(cubin: bytes) -> list[int]:
    # The SM a cubin targets is in its ELF e_flags (offset 48), bits 8-15 in this ELF ABI
    # (bits 0-7 in the older one).
    flags = int.from_bytes(cubin[48:52], "little")
    return [(flags >> 8) & 0xFF, flags & 0xFF]


def test_a_warmup_worker_caches_a_cubin_for_an_absent_compute_capability(cache):
    # What a worker of `python -m sgblas.warmup --cc 80` runs: no GPU is needed (nvJitLink links),
    # a job a line, and the second job of the same variant finds it in the cache.
    result = subprocess.run([sys.executable, "-m", "sgblas.warmup", "--worker", "--cc", "80"],
                            input="scale_c_32x8\nscale_c_32x8\nno_such_variant\n", capture_output=True, text=True,
                            env=dict(os.environ, **REAL_COMPILE_ENV), timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("done scale_c_32x8 compiled ") and lines[1].startswith("done scale_c_32x8 cache "), lines
    assert lines[2].startswith("failed no_such_variant KeyError") and len(lines) == 3, lines
    from sgblas.kernels.spec import by_name

    entry = cubin_of(by_name("scale_c_32x8"), (8, 0))
    assert entry is not None and entry.cubin[:4] == b"\x7fELF" and entry.path.parent == cache
    assert entry.entry_name.startswith("_Z") and "scale" in entry.entry_name
    assert 80 in _flags_sm(entry.cubin), _flags_sm(entry.cubin)


def test_a_read_only_cache_missing_an_entry_still_gives_a_working_cubin(locations, cache):
    # The site cache is read-only (mode 0555; the write is refused as it would be for a user
    # who is not root) and the per-user cache cannot be created: the kernel compiles in this
    # process and comes back from memory.
    os.chmod(cache, 0o555)
    blocker = locations.user.parent.parent / "a-file"
    blocker.write_text("")
    script = textwrap.dedent(f"""
        import json, logging, os, tempfile
        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
        real_mkstemp = tempfile.mkstemp
        def mkstemp(*args, **kwargs):
            if os.path.realpath(kwargs.get("dir") or "") == {str(os.path.realpath(cache))!r}:
                raise PermissionError(13, "Permission denied", kwargs["dir"])
            return real_mkstemp(*args, **kwargs)
        tempfile.mkstemp = mkstemp
        from sgblas.kernels.spec import by_name
        from sgblas.runtime.build import fill_cache
        (entry, source), = fill_cache([by_name("scale_c_32x8")], (8, 0)).values()
        print(json.dumps({{"source": source, "path": entry.path and str(entry.path), "name": entry.entry_name,
                           "cubin": entry.cubin[:64].hex(), "files": os.listdir({str(cache)!r})}}))
    """)
    env = dict(os.environ, **REAL_COMPILE_ENV, NUMBA_CACHE_DIR=str(blocker / "numba"))
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["source"] == "compiled, not stored" and report["path"] is None and report["files"] == []
    cubin = bytes.fromhex(report["cubin"])
    assert cubin[:4] == b"\x7fELF" and 80 in _flags_sm(cubin) and "scale" in report["name"]
    log = result.stderr
    assert "WARNING sgblas is compiling 1 kernel variant for compute capability 8.0" in log
    assert log.count("WARNING") == 3 and log.count("could not store compiled kernels anywhere") == 1
    assert "WARNING sgblas made 1 kernel variant for compute capability 8.0 ready" in log
    assert str(cache) in log and "Permission denied" in log and "Traceback" not in log


# -- on a GPU -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def site_cache(tmp_path_factory):
    """A complete cache for the current device, made by the warm-up command.

    The site starts with the entries of the current key that this process's caches hold
    already (the warm-up command loads and checks each, and compiles only what they lack): a
    cold warm-up of the whole registry costs minutes, and the tests that use this fixture are
    about what an import does with the site, not about compiling."""
    site = tmp_path_factory.mktemp("site")
    os.chmod(site, 0o755)
    from sgblas.kernels.spec import REGISTRY

    names = {kernel_cache.entry_file_name(spec.name, cc, key, kind)
             for spec in REGISTRY for cc in {(9, 0), _device_cc()} for key, kind in _keys(spec, cc)}
    for location in kernel_cache.search_path():
        for entry in sorted(Path(location.path).glob("*.*")):
            if entry.name in names and not (site / entry.name).exists():
                shutil.copyfile(entry, site / entry.name)
                os.chmod(site / entry.name, 0o644)
    # An empty per-user cache: entries found there would not be written to the site.
    user = tmp_path_factory.mktemp("empty-user-cache")
    env = dict(os.environ, **{kernel_cache.CACHE_DIR_VARIABLE: str(site)}, NUMBA_CACHE_DIR=str(user))
    result = subprocess.run([sys.executable, "-m", "sgblas.warmup"], capture_output=True, text=True, env=env,
                            timeout=1800)
    assert result.returncode == 0, result.stdout + result.stderr
    cubins = {kernel_cache.entry_file_name(spec.name, _device_cc(), build.cubin_key(build.variant_key(spec, _device_cc())))
              for spec in REGISTRY}
    for stray in [p for p in site.iterdir() if p.name not in cubins]:  # PTX, other devices' entries
        stray.unlink()
    assert sorted(p.name for p in site.iterdir()) == sorted(cubins), result.stdout
    return site


def _device_cc() -> tuple[int, int]:
    from sgblas.runtime.device import compute_capability, current_device

    return compute_capability(current_device())


def _keys(spec, cc) -> list[tuple[str, str]]:
    key = build.variant_key(spec, cc)
    return [(key, "ptx"), (build.cubin_key(key), "cubin")]


#: Loaded by every Python process of the test (its compile workers too, which inherit the
#: environment): the site cache refuses writes there, as it does for a user who is not root.
_REFUSE_SITE_WRITES = """
import os, tempfile
_real_mkstemp = tempfile.mkstemp
def _mkstemp(*args, **kwargs):
    if os.path.realpath(kwargs.get("dir") or "") == os.path.realpath(os.environ["SGBLAS_CACHE_DIR"]):
        raise PermissionError(13, "Permission denied", kwargs["dir"])
    return _real_mkstemp(*args, **kwargs)
tempfile.mkstemp = _mkstemp
"""

_IMPORT_AND_CALL = """
    import json, logging, os, sys
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s %(message)s")
    import numpy as np
    import sgblas
    from numba import cuda
    from sgblas.runtime.device import current_device
    from sgblas.runtime.loader import load_reports
    h = sgblas.Handle()
    a = cuda.to_device(np.ones(64 * 64, np.float32))
    b = cuda.to_device(np.ones(64 * 64, np.float32))
    c = cuda.to_device(np.zeros(64 * 64, np.float32))
    status = sgblas.sgemm(h, "N", "N", 64, 64, 64, 1.0, a, 64, b, 64, 0.0, c, 64)
    print(json.dumps({"status": int(status),
                      "c": float(c.copy_to_host()[0]),
                      "sources": sorted({r.source for r in load_reports(current_device())})}))
"""


def _ptx_key_of(cubin_name: str) -> str:
    """The PTX key of the registry row whose cubin file is ``cubin_name``."""
    from sgblas.kernels.spec import by_name

    spec = by_name(cubin_name.split(".", 1)[0])
    return build.variant_key(spec, _device_cc())


def _import_with_site_cache(site: Path, user_cache: Path) -> tuple[dict, str]:
    hook = site.parent / "refuse-site-writes"
    hook.mkdir(exist_ok=True)
    (hook / "sitecustomize.py").write_text(_REFUSE_SITE_WRITES)
    path = os.pathsep.join(p for p in (str(hook), os.environ.get("PYTHONPATH", "")) if p)
    env = dict(os.environ, **{kernel_cache.CACHE_DIR_VARIABLE: str(site)}, NUMBA_CACHE_DIR=str(user_cache),
               PYTHONPATH=path)
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(_IMPORT_AND_CALL)], capture_output=True,
                            text=True, env=env, timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1]), result.stderr


@pytest.mark.gpu
def test_import_with_a_read_only_cache_missing_an_entry_and_no_writable_location(site_cache, tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    entries = sorted(site_cache.glob("*.cubin"))
    for entry in entries[1:]:  # the first is missing
        (site / entry.name).write_bytes(entry.read_bytes())
        os.chmod(site / entry.name, 0o644)
    os.chmod(site, 0o555)
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    report, log = _import_with_site_cache(site, blocker / "numba")  # the per-user cache cannot exist
    assert report["status"] == 0 and report["c"] == 64.0, report
    assert report["sources"] == ["cache", "compiled, not stored"], report
    assert log.count("WARNING sgblas") == 3 and log.count("could not store compiled kernels anywhere") == 1, log
    assert "WARNING sgblas sgblas is compiling 1 kernel variant" in log and "kept in memory only" in log, log
    assert sorted(p.name for p in site.iterdir()) == [e.name for e in entries[1:]]


@pytest.mark.gpu
def test_import_with_a_read_only_cache_missing_an_entry_stores_it_in_the_user_cache(site_cache, tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    entries = sorted(site_cache.glob("*.cubin"))
    for entry in entries[1:]:
        (site / entry.name).write_bytes(entry.read_bytes())
    os.chmod(site, 0o555)
    user = tmp_path / "numba"
    report, log = _import_with_site_cache(site, user)
    assert report["status"] == 0 and report["c"] == 64.0, report
    assert report["sources"] == ["cache", "compiled in a worker"], report
    stored = sorted(p.name for p in (user / "sgblas").iterdir() if not p.name.startswith("."))
    assert stored == sorted([entries[0].name, entries[0].name.rsplit(".", 2)[0] + "." + _ptx_key_of(entries[0].name)
                             + ".ptx"]), stored
    assert log.count("WARNING sgblas") == 3 and f"they are stored in {user / 'sgblas'}" in log, log
    again, log = _import_with_site_cache(site, user)  # the next process finds it there
    assert again["sources"] == ["cache"] and "WARNING sgblas" not in log, (again, log)
