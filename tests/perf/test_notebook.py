"""The performance notebook executes headless, top to bottom, without a GPU.

Each run sends the figures to a temporary folder through ``SGBLAS_FIGURE_DIR`` so that
``docs/img`` is never touched, and checks that the three PNG files were written.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

nbclient = pytest.importorskip(
    "nbclient", reason="nbclient is not installed (install the 'notebook' extra: pip install .[notebook])")
nbformat = pytest.importorskip(
    "nbformat", reason="nbformat is not installed (install the 'notebook' extra: pip install .[notebook])")
pytest.importorskip(
    "ipykernel", reason="ipykernel is not installed (install the 'notebook' extra: pip install .[notebook])")
pytest.importorskip(
    "matplotlib", reason="matplotlib is not installed (install the 'notebook' extra: pip install .[notebook])")

from perf import figures, results_io  # noqa: E402
from perf_synthetic import write_synthetic_results  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = REPO_ROOT / "perf" / "sgemm_perf.ipynb"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _execute(monkeypatch: pytest.MonkeyPatch, results_dir: Path | None, figure_dir: Path,
             run_benchmark: bool = False):
    """Run the notebook in a fresh kernel with the given folders; returns the executed notebook."""
    if results_dir is None:
        monkeypatch.delenv(results_io.RESULTS_DIR_ENV, raising=False)
    else:
        monkeypatch.setenv(results_io.RESULTS_DIR_ENV, str(results_dir))
    monkeypatch.setenv(figures.FIGURE_DIR_ENV, str(figure_dir))
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    if run_benchmark:
        switch = next(cell for cell in nb.cells if cell.cell_type == "code")
        switch.source = switch.source.replace("RUN_BENCHMARK = False", "RUN_BENCHMARK = True")
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                     resources={"metadata": {"path": str(NOTEBOOK.parent)}})
    client.execute()
    return nb


def _outputs(nb) -> list:
    return [out for cell in nb.cells if cell.cell_type == "code" for out in cell.get("outputs", [])]


def _assert_figures(figure_dir: Path, keys=("square", "ratio", "overhead", "accuracy")) -> None:
    for key in keys:
        path = figure_dir / figures.FIGURE_FILES[key]
        assert path.is_file(), f"the notebook did not write {path.name}"
        assert path.read_bytes()[:8] == PNG_MAGIC, f"{path.name} is not a PNG file"
        assert path.stat().st_size > 10_000, f"{path.name} is suspiciously small"


def test_notebook_switch_is_off_by_default():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    first_code = next(cell for cell in nb.cells if cell.cell_type == "code")
    assert "RUN_BENCHMARK = False" in first_code.source


@pytest.mark.slow  # a kernel start; the default run renders synthetic results in the switch test
def test_notebook_executes_on_results(tmp_path, monkeypatch):
    results = tmp_path / "results"
    write_synthetic_results(results)
    figure_dir = tmp_path / "img"
    nb = _execute(monkeypatch, results, figure_dir)
    _assert_figures(figure_dir)
    outputs = _outputs(nb)
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) >= 4, "the notebook displayed fewer than four figures"
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "SYNTHETIC TEST DATA" in text, "synthetic results must be flagged in the output"
    assert "SYNTHETIC TEST DEVICE" in text
    assert not any(o.output_type == "error" for o in outputs)


def test_run_benchmark_switch_without_gpu_uses_saved_results(tmp_path, monkeypatch):
    monkeypatch.setenv("NUMBA_ENABLE_CUDASIM", "1")  # whatever this machine has, no real GPU
    results = tmp_path / "results"
    written = write_synthetic_results(results)
    figure_dir = tmp_path / "img"
    nb = _execute(monkeypatch, results, figure_dir, run_benchmark=True)
    text = "".join(o.get("text", "") for o in _outputs(nb) if o.output_type == "stream")
    assert "RUN_BENCHMARK is True but there is no GPU here" in text
    assert len(list(results.iterdir())) == len(written), "nothing new may be measured without a GPU"
    _assert_figures(figure_dir)


@pytest.mark.slow  # a kernel start each; the default run executes the notebook twice
def test_notebook_without_overhead_or_accuracy_results_still_runs(tmp_path, monkeypatch):
    results = tmp_path / "results"
    write_synthetic_results(results, overhead_too=False, accuracy_too=False)
    figure_dir = tmp_path / "img"
    nb = _execute(monkeypatch, results, figure_dir)
    _assert_figures(figure_dir, keys=("square", "ratio"))
    assert not (figure_dir / figures.FIGURE_FILES["overhead"]).exists()
    assert not (figure_dir / figures.FIGURE_FILES["accuracy"]).exists()
    text = "".join(o.get("text", "") for o in _outputs(nb) if o.output_type == "stream")
    assert "no overhead results" in text and "no accuracy results" in text


@pytest.mark.slow  # a kernel start each; the default run executes the notebook twice
def test_notebook_fails_clearly_without_results(tmp_path, monkeypatch):
    empty = tmp_path / "no-results"
    empty.mkdir()
    figure_dir = tmp_path / "img"
    with pytest.raises(nbclient.exceptions.CellExecutionError) as info:
        _execute(monkeypatch, empty, figure_dir)
    message = str(info.value)
    assert "ResultsError" in message
    assert "no bench results" in message and "python -m perf.bench" in message
    assert not figure_dir.exists() or not any(figure_dir.iterdir()), "figures drawn from nothing"


def test_notebook_executes_on_committed_results(tmp_path, monkeypatch):
    """The committed results in perf/results/ (a real GPU run) must render."""
    if not results_io.list_results("bench", results_io.RESULTS_DIR):
        pytest.fail("perf/results/ holds no bench_*.json: run `python -m perf.bench` and "
                    "`python -m perf.overhead` on the GPU machine and commit the JSON files")
    figure_dir = tmp_path / "img"
    _execute(monkeypatch, None, figure_dir)
    keys = ["square", "ratio"]
    if results_io.list_results("overhead", results_io.RESULTS_DIR):
        keys.append("overhead")
    if figures.load_accuracy(results_io.RESULTS_DIR) is not None:
        keys.append("accuracy")
    _assert_figures(figure_dir, keys)


def test_committed_results_are_real_measurements():
    """Nothing synthetic or simulated may be committed as a result."""
    for kind in ("bench", "overhead"):
        for path in results_io.list_results(kind, results_io.RESULTS_DIR):
            doc = json.loads(path.read_text())
            assert not doc.get("synthetic"), f"{path.name} is synthetic test data"
            assert not (doc.get("device") or {}).get("simulator"), f"{path.name} ran under the simulator"
            results_io.load_results(path)  # follows its schema
    accuracy = figures.load_accuracy(results_io.RESULTS_DIR)
    if accuracy is not None:
        assert not accuracy.get("synthetic"), f"{accuracy['_path']} is synthetic test data"
        assert not (accuracy.get("device") or {}).get("simulator"), f"{accuracy['_path']} ran under the simulator"
