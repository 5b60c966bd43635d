"""Tests for chapter20.claims and data/claims.csv: the 30 claims, verdicts, logs and the audit."""

import json
import math
import re

import numpy as np
import pytest

from chapter20 import claims
from chapter20.claims import (
    DOES_NOT_HOLD,
    HOLDS,
    NEEDS_GPU,
    NOT_MEASURABLE,
    NOT_YET_MEASURED,
    ClaimsLog,
    audit,
    audit_text,
    check,
    get_claim,
    load_claims,
    recorded_rows,
)

IDS = [f"C{i:02d}" for i in range(1, 31)]


# --- the data --------------------------------------------------------------------------------


def test_exactly_thirty_claims_in_order():
    assert list(load_claims()) == IDS


def test_every_claim_is_complete():
    for claim in load_claims().values():
        assert claim.section, claim.id
        assert len(claim.claim) > 20, claim.id
        assert re.fullmatch(r"^\d\d_\w+$", claim.notebook), (claim.id, claim.notebook)
        assert claim.rel_tol >= 0, claim.id
        if claim.quantitative:
            assert claim.unit, f"{claim.id}: a quantitative claim needs a unit"


def test_sections_are_known():
    for claim in load_claims().values():
        assert claim.section in {"overview", "note"} or re.fullmatch(
            r"20\.\d(\.\d)?", claim.section
        ), (claim.id, claim.section)


def test_bounds_are_ordered():
    for claim in load_claims().values():
        if claim.low is not None and claim.high is not None:
            assert claim.low <= claim.high, claim.id


def test_qualitative_claims():
    qualitative = {c.id for c in load_claims().values() if not c.quantitative}
    assert qualitative == {"C02", "C05", "C18", "C24", "C25", "C27", "C28", "C29", "C30"}
    assert get_claim("C02").expected() == "qualitative"


def test_expected_text():
    assert get_claim("C07").expected() == "1.5–2 × speed-up"
    assert get_claim("C11").expected() == "≈ 3 × parameter memory"
    assert get_claim("C26").expected() == "≥ 10 × speed-up"


# --- check() ---------------------------------------------------------------------------------


def test_check_in_range_holds():
    row = check("C07", 1.7)
    assert row.verdict == HOLDS
    assert row.id == "C07" and row.section == "20.2.2"
    assert row.measured == "1.7 × speed-up"
    assert row.expected == "1.5–2 × speed-up"
    assert row.source == "interactive"


@pytest.mark.parametrize("value", [1.4, 2.1, 0.0, -1.0])
def test_check_out_of_range_does_not_hold(value):
    assert check("C07", value).verdict == DOES_NOT_HOLD


def test_check_range_ends_are_inclusive():
    assert check("C07", 1.5).verdict == HOLDS
    assert check("C07", 2).verdict == HOLDS


def test_check_rel_tol_widens_the_range():
    # C11 is "≈ 3" with rel_tol 0.05: [2.85, 3.15].
    assert check("C11", 3.1).verdict == HOLDS
    assert check("C11", 2.9).verdict == HOLDS
    assert check("C11", 3.3).verdict == DOES_NOT_HOLD
    assert check("C11", 2.8).verdict == DOES_NOT_HOLD


def test_check_open_upper_bound():
    assert get_claim("C26").high is None
    assert check("C26", 1e6).verdict == HOLDS
    assert check("C26", 5).verdict == DOES_NOT_HOLD


@pytest.mark.parametrize("value", [math.inf, -math.inf])
def test_check_infinite_value(value):
    try:
        row = check("C26", value)
    except ValueError:
        return  # rejecting a non-finite measurement, like NaN, is fine
    assert row.verdict == (HOLDS if value > 0 else DOES_NOT_HOLD)


def test_check_needs_gpu_still_shows_the_value():
    row = check("C06", 1.2, needs_gpu=True)
    assert row.verdict == NEEDS_GPU
    assert row.measured == "1.2 × speed-up"
    # needs_gpu wins even over a value inside the range.
    assert check("C06", 4.0, needs_gpu=True).verdict == NEEDS_GPU


def test_check_not_measurable():
    row = check("C15", None)
    assert row.verdict == NOT_MEASURABLE
    assert row.measured == "—"
    assert check("C02", None).verdict == NOT_MEASURABLE


def test_check_qualitative_needs_holds():
    with pytest.raises(ValueError, match="qualitative"):
        check("C25", 3.0)


def test_check_holds_on_qualitative_claims():
    assert check("C25", 3.0, holds=True).verdict == HOLDS
    assert check("C25", None, holds=False).verdict == DOES_NOT_HOLD
    assert check("C29", 120.0, holds=True, note="vocab 5000 -> 1200").note == "vocab 5000 -> 1200"


def test_check_holds_overrides_range():
    assert check("C07", 10.0, holds=True).verdict == HOLDS
    assert check("C07", 1.7, holds=False).verdict == DOES_NOT_HOLD


def test_check_unit_must_match():
    assert check("C11", 3.0, unit="× parameter memory").verdict == HOLDS
    with pytest.raises(ValueError, match="unit"):
        check("C11", 300.0, unit="%")


@pytest.mark.parametrize("bad_id", ["C31", "C00", "c01", "", "X"])
def test_check_unknown_id(bad_id):
    with pytest.raises(ValueError, match=re.escape(repr(bad_id))):
        check(bad_id, 1.0)


def test_check_nan_raises():
    with pytest.raises(ValueError, match="NaN"):
        check("C07", float("nan"))


@pytest.mark.parametrize("bad", [True, False, "1.7", [1.7]])
def test_check_non_number_raises(bad):
    with pytest.raises(TypeError, match="measured"):
        check("C07", bad)


def test_check_accepts_numpy_float64():
    assert check("C07", np.float64(1.7)).verdict == HOLDS


@pytest.mark.parametrize("value", [np.float32(1.7), np.int64(2)])
def test_check_accepts_numpy_scalars(value):
    assert check("C07", value).verdict == HOLDS


# --- ClaimsLog -------------------------------------------------------------------------------


def test_claims_log_writes_json(tmp_path):
    log = ClaimsLog("00_overview", directory=tmp_path)
    assert log.path == tmp_path / "00_overview.json"
    row = log.check("C11", 3.05, note="Adam state / weights")
    assert row.source == "00_overview"
    items = json.loads(log.path.read_text(encoding="utf-8"))
    assert [item["id"] for item in items] == ["C11"]
    assert items[0]["verdict"] == HOLDS
    assert items[0]["note"] == "Adam state / weights"
    # Atomic write: no temporary file is left behind.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["00_overview.json"]


def test_claims_log_creates_directory(tmp_path):
    log = ClaimsLog("03_mixed_precision", directory=tmp_path / "a" / "b")
    log.check("C06", 1.1, needs_gpu=True)
    assert (tmp_path / "a" / "b" / "03_mixed_precision.json").is_file()


def test_claims_log_recheck_replaces_row(tmp_path):
    log = ClaimsLog("00_overview", directory=tmp_path)
    log.check("C11", 3.5)
    log.check("C04", 64e9)
    log.check("C11", 3.0)
    items = json.loads(log.path.read_text(encoding="utf-8"))
    assert sorted(item["id"] for item in items) == ["C04", "C11"]
    c11 = next(item for item in items if item["id"] == "C11")
    assert c11["verdict"] == HOLDS and c11["measured"].startswith("3 ")
    assert len(log.rows) == 2


def test_claims_log_text_and_table(tmp_path):
    log = ClaimsLog("00_overview", directory=tmp_path)
    log.check("C11", 3.3, note="measured on a toy model")
    log.check("C04", 64e9)
    text = log.to_text()
    lines = text.splitlines()
    assert lines[0].startswith("C04 [holds]")  # sorted by id
    assert f"C11 [{DOES_NOT_HOLD}]" in text
    assert "measured on a toy model" in text
    assert "claimed ≈ 3 × parameter memory; measured 3.3 × parameter memory" in text
    frame = log.table()
    assert list(frame["id"]) == ["C04", "C11"]
    assert "source" not in frame.columns


@pytest.mark.parametrize("source", ["a/b", "a\\b", ""])
def test_claims_log_bad_source(source):
    with pytest.raises(ValueError, match="source"):
        ClaimsLog(source)


# --- audit -----------------------------------------------------------------------------------


def test_audit_empty_directory(tmp_path):
    frame = audit(tmp_path)
    assert list(frame["id"]) == IDS
    assert set(frame["verdict"]) == {NOT_YET_MEASURED}
    assert frame.loc[frame["id"] == "C11", "note"].item() == "audited in 00_overview"


def test_audit_shows_recorded_verdicts(tmp_path):
    ClaimsLog("00_overview", directory=tmp_path).check("C11", 3.3)
    log = ClaimsLog("03_mixed_precision", directory=tmp_path)
    log.check("C06", 1.1, needs_gpu=True)
    log.check("C27", None, holds=True)
    frame = audit(tmp_path)
    assert list(frame["id"]) == IDS
    verdicts = dict(zip(frame["id"], frame["verdict"]))
    assert verdicts["C11"] == DOES_NOT_HOLD
    assert verdicts["C06"] == NEEDS_GPU
    assert verdicts["C27"] == HOLDS
    assert sum(v == NOT_YET_MEASURED for v in verdicts.values()) == 27
    assert frame.loc[frame["id"] == "C06", "source"].item() == "03_mixed_precision"


def test_audit_one_row_per_source(tmp_path):
    ClaimsLog("00_overview", directory=tmp_path).check("C11", 3.0)
    ClaimsLog("05_memory_efficient_optimizers", directory=tmp_path).check("C11", 3.5)
    frame = audit(tmp_path)
    c11 = frame[frame["id"] == "C11"]
    assert list(c11["source"]) == ["00_overview", "05_memory_efficient_optimizers"]
    assert list(c11["verdict"]) == [HOLDS, DOES_NOT_HOLD]
    assert len(frame) == 31


def test_recorded_rows_binary_file_names_the_file(tmp_path):
    (tmp_path / "broken.json").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ValueError, match="broken.json"):
        recorded_rows(tmp_path)


def test_audit_text(tmp_path):
    ClaimsLog("00_overview", directory=tmp_path).check("C11", 3.3)
    lines = audit_text(audit(tmp_path), width=30).splitlines()
    assert len(lines) == 1 + 30  # header + one line per claim
    assert [line.split()[0] for line in lines[1:]] == IDS
    c11 = lines[IDS.index("C11") + 1]
    assert DOES_NOT_HOLD in c11 and c11.endswith("[00_overview]")
    assert "≈ 3 × parameter memory → 3.3 × parameter memory" in c11
    # Claim text longer than the width is cut to exactly `width` characters with an ellipsis.
    long_claim = get_claim("C13").claim
    assert len(long_claim) > 30
    assert long_claim[:29] + "…" in lines[IDS.index("C13") + 1]


def test_recorded_rows_roundtrip(tmp_path):
    ClaimsLog("00_overview", directory=tmp_path).check("C04", 6.5e10)
    rows = recorded_rows(tmp_path)
    assert len(rows) == 1 and isinstance(rows[0], claims.ClaimRow)
    assert rows[0].verdict == HOLDS and rows[0].source == "00_overview"


@pytest.mark.parametrize("content", ["{not json", '{"id": "C01"}', '[{"id": "C01"}]', "3"])
def test_recorded_rows_corrupt_file(tmp_path, content):
    (tmp_path / "broken.json").write_text(content, encoding="utf-8")
    with pytest.raises(ValueError, match="broken.json"):
        recorded_rows(tmp_path)
    with pytest.raises(ValueError, match="broken.json"):
        audit(tmp_path)
