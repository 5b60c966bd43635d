"""The one rule for GPU figures (``chapter20.core.gpu_record``): a GPU claim is judged only from
a row of the GPU record whose code version is the current one; a row without a code version (or
of older code) is refused for every GPU claim, and the audit shows no GPU verdict that breaks it.
"""

from __future__ import annotations

import pandas as pd
import pytest

import chapter20.core.gpu_record as gpu_record
from chapter20.core.claims import NEEDS_GPU, audit, check, load_claims
from chapter20.core.gpu_record import (
    COLUMNS,
    code_version,
    current_gpu_ratio,
    names_code_version,
    read_gpu_measurements,
    unversioned_gpu_verdicts,
)
from chapter20.cost.estimates import THROUGHPUT_CODE
from chapter20.labs import nb03_precision, nb08_cost, nb09_word2vec

H200 = {"device": "NVIDIA H200", "driver": "x", "torch": "2.11", "command": "bench", "notes": ""}


def _write(path, rows):
    frame = pd.DataFrame([{**H200, "date": "2026-12-03", **row} for row in rows])
    frame[list(COLUMNS)].to_csv(path, index=False)
    return path


def _claim_values():
    """Every GPU claim's reader, as the claim's owner calls it: value or None."""
    return {
        "C06": lambda: nb03_precision.fp16_matmul_speedup(None, 1024)[0],
        "C07": lambda: nb03_precision.mixed_precision_speedup()[0],
        "C21": lambda: nb08_cost.current_speedup(),
        "C26": lambda: nb09_word2vec._gpu_speedup_evidence(None, 1.0)["measured"],
    }


def _rows(code: dict[str, str]):
    """GPU rows of every quantity a GPU claim reads, each with ``code[claim]``."""
    step = nb03_precision.step_seconds_quantity
    return [
        {"quantity": nb03_precision.matmul_quantity(4096, "fp16"), "value": 9.0, "unit": "×",
         "code": code["C06"]},
        *({"quantity": step(p), "value": v, "unit": "s", "code": code["C07"]}
          for p, v in (("fp32", 0.3), ("bf16", 0.1), ("tf32", 0.15))),
        {"quantity": nb09_word2vec.GPU_SPEEDUP_QUANTITY, "value": 12.0, "unit": "×",
         "code": code["C26"]},
    ]  # fmt: skip


def test_every_gpu_claim_has_a_reader_here():
    """A new claim with basis ``gpu`` must be added to the rule's test."""
    gpu = {c.id for c in load_claims().values() if c.basis == "gpu"}
    assert gpu == set(_claim_values())


@pytest.mark.parametrize("stale", ["", "word2vec@000000000000"])
def test_a_row_without_the_current_code_version_is_refused_for_every_gpu_claim(
    tmp_path, monkeypatch, stale
):
    """Rows without a code version (the record's first rows) or of older code: every GPU claim
    reads no value and its verdict is "needs a GPU"; the same rows with the current code
    versions are judged."""
    path = _write(tmp_path / "gpu.csv", _rows(dict.fromkeys(["C06", "C07", "C26"], stale)))
    monkeypatch.setattr(gpu_record, "gpu_measurements_path", lambda: path)
    for claim, value in _claim_values().items():
        assert value() is None, claim
        assert check(claim, None, device="cpu").verdict == NEEDS_GPU
    current = {
        "C06": code_version(*nb03_precision.MATMUL_MODULES),
        "C07": code_version(*THROUGHPUT_CODE),
        "C26": code_version(*nb09_word2vec.GPU_CODE),
    }
    _write(path, _rows(current))
    values = {claim: value() for claim, value in _claim_values().items()}
    assert values == pytest.approx({"C06": 9.0, "C07": 3.0, "C21": 3.0, "C26": 12.0})
    _, device, note = nb03_precision.mixed_precision_speedup()
    assert device == "NVIDIA H200" and names_code_version(note) and "x1.50" in note


def test_current_gpu_ratio_needs_both_figures_of_the_current_code(tmp_path):
    version = code_version("core.measure")
    path = _write(tmp_path / "gpu.csv", [
        {"quantity": "a", "value": 6.0, "unit": "s", "code": version},
        {"quantity": "b", "value": 2.0, "unit": "s", "code": version},
        {"quantity": "c", "value": 1.0, "unit": "s", "code": ""},
    ])  # fmt: skip
    ratio, top, bottom = current_gpu_ratio("a", "b", ("core.measure",), path=path)
    assert (ratio, top.value, bottom.value) == (3.0, 6.0, 2.0)
    assert current_gpu_ratio("a", "c", ("core.measure",), path=path) is None


def test_unversioned_gpu_verdicts_names_judged_gpu_claims_without_a_code_version():
    frame = pd.DataFrame({
        "id": ["C06", "C07", "C21", "C26", "C08"],
        "basis": ["gpu", "gpu", "gpu", "gpu", "measured"],
        "verdict": [NEEDS_GPU, "holds", "holds", "does not hold", "holds"],
        "note": ["", "GPU record (2026-11-29)", "measured in this run",
                 "code word2vec@0123456789ab", ""],
    })  # fmt: skip
    assert unversioned_gpu_verdicts(frame) == ["C07"]


def test_the_audit_applies_the_rule_to_every_gpu_claim(tmp_path):
    """The audit of a checkout (the committed record of the owners' verdicts) judges no GPU claim
    from a figure without its code version; while the GPU record holds no row of any code
    version, every GPU claim reads "needs a GPU"."""
    frame = audit(tmp_path)
    assert unversioned_gpu_verdicts(frame) == []
    if not (read_gpu_measurements()["code"] != "").any():
        gpu = frame[frame["basis"] == "gpu"]
        assert set(gpu["verdict"]) <= {NEEDS_GPU, "not yet measured"}
