"""Make the repository's ``perf`` package importable from the tests under ``tests/perf``.

``perf`` is not installed with sgblas, and pytest puts the test folders first on ``sys.path``,
where this folder (also named ``perf``, without ``__init__.py``) could be taken for a namespace
package. Put the repository root first and forget such a namespace import.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]

if str(REPO_ROOT) not in sys.path[:1]:
    sys.path.insert(0, str(REPO_ROOT))
_loaded = sys.modules.get("perf")
if _loaded is not None and getattr(_loaded, "__file__", None) is None:
    for _name in [m for m in sys.modules if m == "perf" or m.startswith("perf.")]:
        del sys.modules[_name]
