"""sgblas's on-disk kernel cache: one file per (variant, compute capability, key, kind).

Every variant is compiled by Numba with its explicit signature for one compute capability to
PTX, which is linked to a cubin; both are stored here (kinds ``ptx`` and ``cubin``), and a
handle then loads cubins straight into the driver without importing Numba. The key is the
caller's (:mod:`sgblas.runtime.keys` derives it per variant from what makes its binary: the
generated kernel text, the code it calls, its ABI and launch bounds, the compute capability
and the compiler's versions; the cubin's key adds the linker's). An entry's file name carries
the variant, the compute capability, the key and the kind, so a change that alters one
variant's text misses the cache for that variant only, and a new linker relinks the kept PTX
without compiling it again.

Search path. Entries are looked up, in order, in ``$SGBLAS_CACHE_DIR`` when it is set (it
may be a read-only cache an administrator prepared for everyone) and in the per-user cache
(``$NUMBA_CACHE_DIR/sgblas``, else ``$XDG_CACHE_HOME/sgblas``, else ``~/.cache/sgblas``). A
new entry goes to the first location that is trusted and writable; when none is, the
compiled cubin stays in memory for the life of the process (:func:`store`).

Trust. A cubin is machine code that runs in the user's GPU context, and the SHA-256 in its
header proves nothing against whoever can write the file, since they write the checksum
too. So a location is used only when its directory, after resolving symbolic links, and
every directory above it are owned by this user or by root, the directory itself is not
writable by group or others, and every directory above it either is not writable by group
or others or has the sticky bit (as ``/tmp`` does: others cannot rename or remove what they
do not own there). An entry is read only when it is a regular file (not a symbolic link)
owned by this user or root and not writable by group or others. Whatever fails these checks
is skipped and named once per process in a warning on the ``sgblas`` logger. New directories
are created with mode 0700; an existing directory's mode is never changed, so a cache meant
for everyone is made by its owner (``install -d -m 755 DIR``) before it is filled. Entries
are mode 0644: readable wherever their directory is.

An entry is one file: a JSON header line (kind, entry-point name, compute capability, the
payload's SHA-256 and length, the key) followed by the payload. It is written to a temporary
file and renamed into place, so concurrent writers (parallel warm-up workers, two
processes) never leave a torn entry; a header or checksum that does not match is a miss.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import stat
import tempfile
import threading
from pathlib import Path
from typing import Callable, NamedTuple, TypeVar

__all__ = ["CACHE_DIR_VARIABLE", "KINDS", "CacheEntry", "CacheNotWritableError", "Location", "search_path",
           "user_cache_dir", "untrusted_reason", "writable_location", "entry_file_name",
           "read", "write", "store"]

#: The environment variable that puts a cache directory first on the search path.
CACHE_DIR_VARIABLE = "SGBLAS_CACHE_DIR"

_FORMAT = 2
#: What an entry holds: a variant's PTX (what Numba made) or its cubin (what the linker made of it).
KINDS = ("ptx", "cubin")
_ENTRY_MODE = 0o644  # the directory's mode decides who may read
_DIRECTORY_MODE = 0o700

log = logging.getLogger("sgblas")

_T = TypeVar("_T")


class CacheEntry(NamedTuple):
    """A payload (a cubin, or PTX text as bytes) and the name of its kernel entry point;
    ``path`` is the file it came from or went to, None when it was compiled in this process
    and could be stored nowhere."""

    entry_name: str
    cubin: bytes
    path: Path | None = None


class Location(NamedTuple):
    """One directory of the search path and where it came from, for messages."""

    path: Path
    origin: str

    def __str__(self) -> str:
        return f"{self.path} ({self.origin})"


class CacheNotWritableError(OSError):
    """No location of the search path can store an entry; ``problems`` says why for each."""

    def __init__(self, problems: list[tuple[Location, str]]) -> None:
        self.problems = problems
        reasons = "; ".join(f"{location}: {reason}" for location, reason in problems)
        super().__init__(f"no location of sgblas's kernel cache can store entries: {reasons}")


class _Unusable(Exception):
    def __init__(self, reason: str, warned: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.warned = warned  # the trust warning has named it already


_warned: set[tuple] = set()
_warned_lock = threading.Lock()


def _warn_once(key: tuple, message: str) -> None:
    with _warned_lock:
        if key in _warned:
            return
        _warned.add(key)
    log.warning(message)


def user_cache_dir() -> Path:
    """The per-user cache: ``$NUMBA_CACHE_DIR/sgblas``, else ``$XDG_CACHE_HOME/sgblas``, else
    ``~/.cache/sgblas``."""
    numba_dir = os.environ.get("NUMBA_CACHE_DIR")
    if numba_dir:
        return Path(numba_dir) / "sgblas"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "sgblas"


def search_path() -> list[Location]:
    """The locations entries are looked up in, in order (see the module docstring)."""
    locations = []
    explicit = os.environ.get(CACHE_DIR_VARIABLE)
    if explicit:
        locations.append(Location(Path(explicit), f"${CACHE_DIR_VARIABLE}"))
    user = user_cache_dir()
    if not locations or os.path.abspath(user) != os.path.abspath(locations[0].path):
        locations.append(Location(user, "the per-user cache"))
    return locations


def _owner(uid: int) -> str:
    try:
        import pwd

        return f"user {uid} ({pwd.getpwuid(uid).pw_name})"
    except (ImportError, KeyError):
        return f"user {uid}"


def _trusted_owners() -> tuple[int, ...]:
    return (0, os.getuid())


def _writable_by(mode: int) -> str:
    return " and ".join(who for bit, who in ((stat.S_IWGRP, "its group"), (stat.S_IWOTH, "others"))
                        if mode & bit)


def _owner_problem(path: Path, uid: int) -> str | None:
    if uid in _trusted_owners():
        return None
    me = os.getuid()
    whom = "root" if me == 0 else f"this process's {_owner(me)} nor root"
    return f"{path} is owned by {_owner(uid)}, {'not' if me == 0 else 'neither'} {whom}"


def _stat_problem(path: Path, st: os.stat_result, is_leaf: bool) -> str | None:
    """Why ``path`` (a directory of a cache's path, or the cache directory itself when
    ``is_leaf``) lets someone else plant files in the cache, or None."""
    if stat.S_ISLNK(st.st_mode):
        return f"{path} became a symbolic link while it was being checked"
    if not stat.S_ISDIR(st.st_mode):
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(path))
    owner_problem = _owner_problem(path, st.st_uid)
    if owner_problem is not None:
        return owner_problem
    mode = stat.S_IMODE(st.st_mode)
    if mode & (stat.S_IWGRP | stat.S_IWOTH) and (is_leaf or not mode & stat.S_ISVTX):
        return f"{path} is writable by {_writable_by(mode)} (mode {mode:04o})"
    return None


def untrusted_reason(directory: Path) -> str | None:
    """None when entries in ``directory`` can only have been written by this user or root,
    else the sentence saying which directory on its path breaks that and how.

    Raises FileNotFoundError when ``directory`` does not exist (an absent cache holds nothing
    to distrust) and OSError when it is not a directory or a directory on its path cannot be
    examined.
    """
    return _untrusted_reason_resolved(Path(os.path.realpath(directory)))


def _untrusted_reason_resolved(real: Path) -> str | None:
    if not hasattr(os, "getuid"):  # no POSIX owners to check
        return None
    for path in (real, *real.parents):
        problem = _stat_problem(path, os.lstat(path), path == real)
        if problem is not None:
            return problem
    return None


def _trusted_directory(location: Location) -> Path:
    """``location``'s directory with symbolic links resolved, to be used from now on, so
    that a link changed after the check is not followed; raises FileNotFoundError when it
    does not exist, _Unusable when it is not trusted (warning once), is not a directory or
    cannot be examined."""
    real = Path(os.path.realpath(location.path))
    try:
        problem = _untrusted_reason_resolved(real)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise _Unusable(f"it cannot be used ({_describe(exc)})") from None
    if problem is not None:
        _warn_once((real, "untrusted"),
                   f"sgblas does not use the kernel cache {location}: {problem}, so someone other than "
                   f"this user or root could plant machine code there; its entries are neither loaded "
                   f"nor written.")
        raise _Unusable(f"it is not trusted: {problem}", warned=True)
    return real


def _describe(exc: OSError) -> str:
    text = exc.strerror or str(exc)
    return f"{text}: {exc.filename}" if exc.filename else text


def _check_key(key: str, kind: str) -> None:
    if kind not in KINDS:
        raise ValueError(f"kind={kind!r} is not one of {KINDS}")
    if not key or not all(c.isalnum() for c in key):
        raise ValueError(f"key={key!r} is not a non-empty alphanumeric string")


def entry_file_name(variant: str, cc: tuple[int, int], key: str, kind: str = "cubin") -> str:
    """The file name of ``variant``'s entry of ``kind`` for ``cc`` under ``key``, in any location."""
    _check_key(key, kind)
    return f"{variant}.sm_{cc[0]}{cc[1]}.{key}.{kind}"


def _entry_problem(path: Path, st: os.stat_result) -> str | None:
    if not stat.S_ISREG(st.st_mode):
        return f"{path} is not a regular file"
    owner_problem = _owner_problem(path, st.st_uid)
    if owner_problem is not None:
        return owner_problem
    mode = stat.S_IMODE(st.st_mode)
    if mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"{path} is writable by {_writable_by(mode)} (mode {mode:04o})"
    return None


def _read_trusted_file(path: Path, location: Location) -> bytes | None:
    """The bytes of the entry file ``path``, or None when it is absent or fails the checks.

    The checks run on the open file itself (``fstat``), and a symbolic link is not opened at
    all, so nothing can be swapped in between the check and the read.
    """
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        return None
    except OSError as exc:
        problem = (f"{path} is a symbolic link" if os.path.islink(path)
                   else f"{path} cannot be opened ({_describe(exc)})")
        _warn_once((path.parent, "entry"), f"sgblas skips kernel cache entries in {location}: {problem}.")
        return None
    with os.fdopen(fd, "rb") as f:
        problem = _entry_problem(path, os.fstat(f.fileno())) if hasattr(os, "getuid") else None
        if problem is not None:
            _warn_once((path.parent, "entry"),
                       f"sgblas skips kernel cache entries in {location}: {problem}, so someone other than "
                       f"this user or root could have written it.")
            return None
        try:
            return f.read()
        except OSError:
            return None


def _parse(data: bytes, variant: str, cc: tuple[int, int], key: str, kind: str, path: Path) -> CacheEntry | None:
    header_line, newline, cubin = data.partition(b"\n")
    if not newline:
        return None
    try:
        header = json.loads(header_line)
        ok = (header.get("format") == _FORMAT and header.get("variant") == variant
              and header.get("cc") == list(cc) and header.get("key") == key and header.get("kind") == kind
              and header.get("length") == len(cubin)
              and header.get("sha256") == hashlib.sha256(cubin).hexdigest())
    except (ValueError, AttributeError):
        return None
    if not ok:
        return None
    return CacheEntry(str(header["entry_name"]), cubin, path)


def read(variant: str, cc: tuple[int, int], key: str, kind: str = "cubin") -> CacheEntry | None:
    """The first valid, trusted entry of ``kind`` for ``variant``, ``cc`` and ``key`` along the
    search path, or None. Absent, damaged and untrusted entries are misses (untrusted ones are
    named once)."""
    name = entry_file_name(variant, cc, key, kind)
    for location in search_path():
        try:
            directory = _trusted_directory(location)
        except (FileNotFoundError, _Unusable):
            continue
        data = _read_trusted_file(directory / name, location)
        if data is not None:
            entry = _parse(data, variant, cc, key, kind, directory / name)
            if entry is not None:
                return entry
    return None


def _make_directories(path: Path) -> None:
    """Create ``path`` and any missing parents with mode 0700 (the umask may only narrow it)."""
    missing = []
    while not path.exists():
        missing.append(path)
        if path.parent == path:
            break
        path = path.parent
    for directory in reversed(missing):
        try:
            os.mkdir(directory, _DIRECTORY_MODE)
        except FileExistsError:  # another process made it first; the trust check judges it
            pass


def _prepare(location: Location) -> Path:
    """``location``'s trusted directory, created if missing and checked for write access;
    raises _Unusable with the reason otherwise."""
    try:
        _make_directories(location.path)
    except OSError as exc:
        raise _Unusable(f"it does not exist and cannot be created ({_describe(exc)})") from None
    try:
        directory = _trusted_directory(location)
    except FileNotFoundError as exc:
        raise _Unusable(f"it vanished while it was being prepared ({_describe(exc)})") from None
    if not os.access(directory, os.W_OK | os.X_OK):
        st = os.stat(directory)
        raise _Unusable(f"it is not writable by this process's {_owner(os.getuid())} "
                        f"(mode {stat.S_IMODE(st.st_mode):04o}, owned by {_owner(st.st_uid)})")
    return directory


def _into_first_writable(attempt: Callable[[Path], _T]) -> tuple[_T, Location]:
    """Run ``attempt(directory)`` in the first location where it succeeds; a location before
    it that failed is named once in a warning. Raises CacheNotWritableError when none does."""
    problems: list[tuple[Location, str, bool]] = []
    for location in search_path():
        try:
            result = attempt(_prepare(location))
        except _Unusable as exc:
            problems.append((location, exc.reason, exc.warned))
            continue
        except OSError as exc:  # what os.access cannot see: a read-only mount, a full disk, a policy
            problems.append((location, f"writing there failed ({_describe(exc)})", False))
            continue
        for failed, reason, warned in problems:
            if not warned:
                _warn_once((failed.path, "unwritable"),
                           f"sgblas cannot store compiled kernels in the kernel cache {failed}: {reason}; "
                           f"they are stored in {location} instead.")
        return result, location
    raise CacheNotWritableError([(location, reason) for location, reason, _ in problems])


def writable_location() -> Path:
    """The directory new entries go to: the first location of the search path that is
    trusted and where a file can really be created (tried, then removed). Raises
    CacheNotWritableError, saying why for each location, when there is none."""

    def probe(directory: Path) -> Path:
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".probe.", suffix=".tmp")
        os.close(fd)
        os.unlink(tmp)
        return directory

    return _into_first_writable(probe)[0]


def _write_into(directory: Path, variant: str, cc: tuple[int, int], key: str, kind: str, entry_name: str,
                cubin: bytes) -> Path:
    path = directory / entry_file_name(variant, cc, key, kind)
    header = {"format": _FORMAT, "variant": variant, "cc": list(cc), "key": key, "kind": kind,
              "entry_name": entry_name, "length": len(cubin),
              "sha256": hashlib.sha256(cubin).hexdigest()}
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{variant}.", suffix=".tmp")
    try:
        os.fchmod(fd, _ENTRY_MODE)
        with os.fdopen(fd, "wb") as f:
            f.write(json.dumps(header, sort_keys=True).encode() + b"\n" + cubin)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path


def write(variant: str, cc: tuple[int, int], key: str, entry_name: str, cubin: bytes, kind: str = "cubin") -> Path:
    """Store a payload of ``kind`` atomically in the first trusted, writable location; returns
    its path. Raises CacheNotWritableError when no location can take it."""
    _check_key(key, kind)
    return _into_first_writable(lambda directory: _write_into(directory, variant, cc, key, kind, entry_name,
                                                              cubin))[0]


def store(variant: str, cc: tuple[int, int], key: str, entry_name: str, cubin: bytes,
          kind: str = "cubin") -> CacheEntry:
    """:func:`write`, but a cache that cannot be written is not an error: the entry is
    returned without a path (kept in memory by the caller) and the reasons are named once
    per process in a warning."""
    try:
        return CacheEntry(entry_name, cubin, write(variant, cc, key, entry_name, cubin, kind))
    except CacheNotWritableError as exc:
        _warn_once(("nowhere", tuple(location.path for location, _ in exc.problems)),
                   f"sgblas could not store compiled kernels anywhere ({exc}). They are kept in memory for "
                   f"this process only, so the next process compiles them again; set {CACHE_DIR_VARIABLE} "
                   f"to a directory this user can write, then run `python -m sgblas.warmup`.")
        return CacheEntry(entry_name, cubin, None)
