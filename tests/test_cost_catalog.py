"""§20.5.1 The price catalog (chapter20.cost.catalog): a dated snapshot with a source on every
row, the chapter's rows, and a loader that names the bad line and column."""

from __future__ import annotations

import pytest

from chapter20.core.paths import data_file
from chapter20.cost.catalog import load_catalog, snapshot_label

CATALOG = load_catalog()


def test_catalog_is_a_dated_snapshot_with_sources_for_every_row():
    assert len(CATALOG) >= 6
    assert CATALOG["snapshot_date"].str.match(r"^\d{4}-\d{2}").all()
    assert (CATALOG["source"].str.len() > 10).all()
    assert "snapshot" in snapshot_label() and "not live" in snapshot_label()


def test_catalog_has_the_chapters_types_and_current_gpus_on_two_providers():
    assert {"p3.2xlarge", "p4d.24xlarge", "g5.xlarge"} <= set(CATALOG["instance"])
    for model in ("A100", "H100", "H200"):
        providers = set(CATALOG.loc[CATALOG["gpu_model"] == model, "provider"])
        assert len(providers) >= 2, f"{model} on {providers}"


def test_catalog_names_the_g5_gpu_correctly_and_keeps_the_chapters_prices():
    """Claim C18 and listing L12's mislabel: the g5.xlarge carries an A10G, not a T4."""
    rows = CATALOG.set_index("instance")
    assert rows.loc["g5.xlarge", "gpu_model"] == "A10G"
    chapter = {"p3.2xlarge": (3.06, 1, "V100"), "p4d.24xlarge": (32.77, 8, "A100"),
               "g5.xlarge": (1.006, 1, "A10G")}  # fmt: skip
    for instance, (price, gpus, model) in chapter.items():
        assert rows.loc[instance, "on_demand_per_hour"] == pytest.approx(price, rel=1e-3)
        assert (rows.loc[instance, "gpus"], rows.loc[instance, "gpu_model"]) == (gpus, model)


def _write(tmp_path, edit):
    """A copy of the real catalog with ``edit(lines)`` applied; returns its path."""
    lines = data_file("instance_prices.csv").read_text(encoding="utf-8").splitlines()
    path = tmp_path / "prices.csv"
    path.write_text("\n".join(edit(lines)) + "\n", encoding="utf-8")
    return path


def _set_cell(lines, line_number, column, value):
    header = lines[0].split(",")
    cells = lines[line_number - 1].split(",")
    cells[header.index(column)] = value
    lines[line_number - 1] = ",".join(cells)
    return lines


@pytest.mark.parametrize(
    "column, value, reason",
    [
        ("on_demand_per_hour", "-1", "must be a finite number > 0"),
        ("on_demand_per_hour", "nan", "must be a finite number > 0"),
        ("gpus", "two", "must be an int >= 1"),
        ("gpu_memory_gb", "", "must be a number"),
        ("snapshot_date", "last May", "must be a date"),
        ("snapshot_date", "2025-02-30", "must be a real calendar date"),
        ("confidence", "sure", "must be one of"),
        ("spot_high_per_hour", "99", "must be <= on_demand_per_hour"),
        ("spot_low_per_hour", "", "give both ends of the spot range"),
        ("source", " ", "must not be empty"),
    ],
)
def test_loader_names_the_bad_line_and_column(tmp_path, column, value, reason):
    path = _write(tmp_path, lambda lines: _set_cell(lines, 3, column, value))
    with pytest.raises(ValueError, match=rf"line 3, column '{column}': {reason}"):
        load_catalog(path)


def test_loader_rejects_missing_columns_duplicates_and_multi_gpu_rows_without_a_link(tmp_path):
    def drop_source(lines):
        return [line.rsplit(",", 1)[0] if i else line.replace(",source", "") for i, line in
                enumerate(lines)]  # fmt: skip

    with pytest.raises(ValueError, match=r"missing column\(s\) \['source'\]"):
        load_catalog(_write(tmp_path, drop_source))
    with pytest.raises(ValueError, match="line 4, column 'instance': duplicate of line 2"):
        load_catalog(_write(tmp_path, lambda lines: lines[:3] + [lines[1]] + lines[3:]))
    multi = CATALOG.index[CATALOG["gpus"] > 1][0] + 2  # header is line 1, first row line 2
    with pytest.raises(ValueError, match=rf"line {multi}, column 'gpu_link_gb_s'"):
        load_catalog(_write(tmp_path, lambda ls: _set_cell(ls, multi, "gpu_link_gb_s", "")))
