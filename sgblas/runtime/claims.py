"""Sharing the compile work between processes that fill one kernel cache at the same time.

Two mechanisms, both in the cache directory the entries go to:

* **A claim per entry.** Before compiling a variant, a process creates ``.NAME.claim``
  (linked into place from a private file: one process wins) holding its pid, host name and start time, and keeps
  the file's modification time fresh while it compiles (:class:`Heartbeat`). Another process
  that finds the claim leaves that variant to its holder and waits for the entry to appear. A
  claim is stale, and is taken over, when its holder is on this host and its pid is gone, or
  when its heartbeat is older than :data:`STALE_AFTER_S` (the only test that works for a holder
  on another host, a cache on a shared file system). Taking over renames the stale file to a
  private name first, so of several processes that judge it stale at once one proceeds.
  At worst (a race this cannot see) a variant is compiled twice; entries are written
  atomically, so that costs time, never a torn file.
* **CPU slots.** Compiling is single-threaded and CPU-bound. ``.cpu-HOST/slot-I`` for I below
  the CPU count are locked with ``flock`` while a compile runs, so the compilers of all
  processes of a host together never outnumber its CPUs. The kernel releases a dead process's
  locks, so a slot is never lost.

Everything here is best effort around correctness that does not depend on it: the cache's
entries are validated on read whoever wrote them.
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
import threading
import time
from pathlib import Path
from typing import NamedTuple

__all__ = ["STALE_AFTER_S", "HEARTBEAT_S", "Claim", "Holder", "claim_path", "holder", "try_claim", "Heartbeat",
           "cpu_count", "CpuSlots"]

#: A claim whose heartbeat is older than this is stale, wherever its holder runs.
STALE_AFTER_S = 90.0
#: How often a holder refreshes its claims' modification time.
HEARTBEAT_S = 5.0

try:
    import fcntl
except ImportError:  # no flock: every process runs as many compilers as it has CPUs
    fcntl = None  # type: ignore[assignment]


def _host() -> str:
    return socket.gethostname()


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # someone else's process (PermissionError): alive
        return True
    try:  # an exited process its parent has not reaped yet still answers the signal
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return True


class Holder(NamedTuple):
    """Who holds a claim: pid, host, seconds since its last heartbeat, and whether it is stale
    (with the reason)."""

    pid: int | None
    host: str | None
    age_s: float
    stale: str | None

    def __str__(self) -> str:
        who = f"pid {self.pid} on host {self.host}" if self.pid is not None else "an unknown process"
        return f"{who} (heartbeat {self.age_s:.0f} s ago)"


class Claim:
    """A claim this process holds; :meth:`release` removes it."""

    def __init__(self, path: Path, record: dict) -> None:
        self.path = path
        self.record = record
        self.released = False

    def touch(self) -> None:
        if not self.released:
            try:
                os.utime(self.path)
            except OSError:  # taken over or removed: nothing of ours left to refresh
                pass

    def release(self) -> None:
        if self.released:
            return
        self.released = True
        try:
            with open(self.path, "rb") as f:
                mine = json.loads(f.read() or b"{}") == self.record
        except (OSError, ValueError):
            return
        if mine:  # a claim that was taken over belongs to its new holder
            try:
                os.unlink(self.path)
            except OSError:
                pass


def claim_path(directory: Path, name: str) -> Path:
    """Where the claim on the entry ``name`` in ``directory`` lives."""
    return Path(directory) / f".{name}.claim"


def holder(path: Path, now: float | None = None) -> Holder | None:
    """The holder of the claim file ``path``, None when there is no claim there."""
    try:
        st = os.stat(path)
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return None
    except OSError:
        return Holder(None, None, 0.0, None)
    age = max(0.0, (time.time() if now is None else now) - st.st_mtime)
    try:
        record = json.loads(raw)
        pid, host = int(record["pid"]), str(record["host"])
    except (ValueError, KeyError, TypeError):
        # Being written this instant, or garbled: only its age can tell.
        stale = f"it is unreadable and {age:.0f} s old" if age > STALE_AFTER_S else None
        return Holder(None, None, age, stale)
    if age > STALE_AFTER_S:
        stale = f"its heartbeat is {age:.0f} s old (more than {STALE_AFTER_S:.0f} s)"
    elif host == _host() and not _pid_alive(pid):
        stale = f"process {pid} on this host has exited"
    else:
        stale = None
    return Holder(pid, host, age, stale)


def try_claim(directory: Path, name: str) -> Claim | Holder:
    """Claim ``name`` in ``directory``: the :class:`Claim` when this process now holds it,
    else the live :class:`Holder` of the claim. A stale claim is taken over."""
    path = claim_path(directory, name)
    for _ in range(8):
        record = {"pid": os.getpid(), "host": _host(), "started": time.time(),
                  "thread": threading.get_ident()}
        # Written whole under a private name, then linked into place (which fails if the
        # claim exists): nobody ever reads a claim without its holder.
        fd, private = tempfile.mkstemp(dir=path.parent, prefix=f"{path.name}.", suffix=".new")
        with os.fdopen(fd, "wb") as f:
            f.write(json.dumps(record, sort_keys=True).encode())
        try:
            os.link(private, path)
        except FileExistsError:
            found = holder(path)
            if found is None:
                continue  # released between the two calls: try again
            if found.stale is None:
                return found
            _take_over(path, found)
            continue
        finally:
            os.unlink(private)
        return Claim(path, json.loads(json.dumps(record, sort_keys=True)))
    found = holder(path)
    return found if found is not None else Holder(None, None, 0.0, None)


def _take_over(path: Path, judged: Holder) -> None:
    """Remove the stale claim at ``path`` unless another process replaced it meanwhile."""
    private = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.stale")
    try:
        os.rename(path, private)
    except OSError:  # someone else moved it first
        return
    now = holder(private)
    if now is not None and (now.pid, now.host) != (judged.pid, judged.host):
        # A fresh claim was made between the judgement and the rename: put it back.
        try:
            os.link(private, path)
        except OSError:
            pass
    try:
        os.unlink(private)
    except OSError:
        pass


class Heartbeat:
    """Refreshes every held claim's modification time until stopped (a daemon thread)."""

    def __init__(self) -> None:
        self._claims: set[Claim] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sgblas-claim-heartbeat", daemon=True)
        self._thread.start()

    def add(self, claim: Claim) -> None:
        with self._lock:
            self._claims.add(claim)

    def discard(self, claim: Claim) -> None:
        with self._lock:
            self._claims.discard(claim)

    def _run(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            with self._lock:
                claims = list(self._claims)
            for claim in claims:
                claim.touch()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=1.0)


def cpu_count() -> int:
    """CPUs this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


class CpuSlots:
    """This host's compile slots in ``directory``: at most :func:`cpu_count` held at once by
    all processes together (without ``flock``, by this process alone)."""

    def __init__(self, directory: Path, count: int | None = None) -> None:
        self.count = count or cpu_count()
        self.directory = Path(directory) / f".cpu-{_host()}"
        self._held: dict[int, int] = {}  # slot -> fd
        self._usable = fcntl is not None
        if self._usable:
            try:
                os.makedirs(self.directory, mode=0o700, exist_ok=True)
            except OSError:
                self._usable = False

    def acquire(self) -> int | None:
        """A free slot's number, now held, or None when all are busy."""
        for slot in range(self.count):
            if slot in self._held:
                continue
            if not self._usable:
                self._held[slot] = -1
                return slot
            try:
                fd = os.open(self.directory / f"slot-{slot}", os.O_CREAT | os.O_RDWR, 0o600)
            except OSError:
                self._usable = False
                return self.acquire()
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                continue
            self._held[slot] = fd
            return slot
        return None

    def release(self, slot: int) -> None:
        fd = self._held.pop(slot, None)
        if fd is not None and fd >= 0:
            os.close(fd)  # closing drops the flock

    def release_all(self) -> None:
        for slot in list(self._held):
            self.release(slot)
