"""§20.5.1 The price catalog (chapter20.cost.catalog): SkyPilot's catalog at one commit, every
price traced to a source file and commit, a loader that names the bad line and column, and the
per-region view the cost model reads."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

from chapter20.core.paths import data_file
from chapter20.cost.catalog import (
    DEFAULT_REGIONS,
    load_catalog,
    load_price_history,
    load_snapshot,
    load_sources,
    price_table,
    snapshot_label,
    spot_discounts,
)

SNAPSHOT = load_snapshot()
SOURCES = load_sources()
CATALOG = load_catalog()
HASH = re.compile(r"^[0-9a-f]{40}$")


def test_every_price_row_traces_to_a_source_file_and_commit():
    assert set(SOURCES["source"]) == {"aws", "gcp", "lambda"}
    assert (SNAPSHOT["source"] == SNAPSHOT["cloud"]).all()
    for row in SOURCES.itertuples():
        assert row.repository == "skypilot-org/skypilot-catalog"
        assert row.path == f"catalogs/v5/{row.source}/vms.csv"
        assert HASH.match(row.commit) and HASH.match(row.blob)
        assert pd.Timestamp(row.commit_date).year >= 2022
        assert row.rows_kept == int((SNAPSHOT["source"] == row.source).sum())
        assert row.rows_kept <= row.rows_read


def test_every_history_row_names_a_commit_no_later_than_the_snapshot():
    history = load_price_history()
    assert history["commit"].str.match(HASH).all()
    last = SOURCES.set_index("source")["commit_date"].map(lambda t: pd.Timestamp(t[:10]))
    assert (history["date"] <= history["cloud"].map(last)).all()
    for (cloud, _), series in history.groupby(["cloud", "instance"]):
        assert series["date"].is_unique
        newest = series.sort_values("date").iloc[-1]
        if newest["date"] == last[cloud]:  # the snapshot's own day reads the snapshot's commit
            assert newest["commit"] == SOURCES.set_index("source").loc[cloud, "commit"]


def test_snapshot_holds_gpu_types_of_three_clouds_with_the_chapters_three():
    assert len(SNAPSHOT) > 1000
    assert set(SNAPSHOT["cloud"]) == {"aws", "gcp", "lambda"}
    assert not SNAPSHOT["gpu_model"].isin(["Inferentia", "Trainium", "Gaudi HL-205"]).any()
    rows = CATALOG.set_index("instance")
    chapter = {"p3.2xlarge": (1, "V100"), "p4d.24xlarge": (8, "A100"), "g5.xlarge": (1, "A10G")}
    for instance, (gpus, model) in chapter.items():  # L12 calls the g5.xlarge's A10G a T4
        assert (rows.loc[instance, "gpus"], rows.loc[instance, "gpu_model"]) == (gpus, model)
        assert rows.loc[instance, "region"] == "us-east-1"


def test_the_catalog_is_one_row_per_type_in_one_region_per_cloud():
    assert CATALOG["instance"].is_unique
    for cloud, region in DEFAULT_REGIONS.items():
        assert set(CATALOG.loc[CATALOG["cloud"] == cloud, "region"]) == {region}
    spot = CATALOG.dropna(subset=["spot_median_per_hour"])
    assert (spot["spot_low_per_hour"] <= spot["spot_median_per_hour"]).all()
    assert (spot["spot_median_per_hour"] <= spot["spot_high_per_hour"]).all()
    assert (spot["spot_zones"] <= spot["zones"]).all()
    p4d = SNAPSHOT[(SNAPSHOT["instance"] == "p4d.24xlarge") & (SNAPSHOT["region"] == "us-east-1")]
    row = CATALOG.set_index("instance").loc["p4d.24xlarge"]
    assert row["zones"] == len(p4d)
    assert row["spot_low_per_hour"] == pytest.approx(p4d["spot_per_hour"].astype(float).min())
    assert CATALOG.loc[CATALOG["cloud"] == "lambda", "spot_median_per_hour"].isna().all()


def test_other_regions_and_bad_regions():
    europe = load_catalog({"aws": "eu-west-1"})
    assert set(europe["cloud"]) == {"aws"} and set(europe["region"]) == {"eu-west-1"}
    with pytest.raises(ValueError, match=r"cloud must be one of \['aws', 'gcp', 'lambda'\]"):
        load_catalog({"azure": "eastus"})
    with pytest.raises(ValueError, match=r"aws region must be one of \[.*'us-east-1'"):
        load_catalog({"aws": "mars-1"})


def test_label_names_each_clouds_date_without_hashes():
    label = snapshot_label()
    for row in SOURCES.itertuples():
        assert f"{row.source} {row.commit_date[:10]}" in label
        assert row.commit[:7] not in label
    assert "not live" in label


def test_display_tables():
    table = price_table()
    assert table.loc["g5.xlarge", "GPUs"] == "1 x A10G"
    assert table.loc["gpu_8x_a100", "spot $/h (zones)"] == "—"
    discounts = spot_discounts()
    assert len(discounts) == SNAPSHOT["spot_per_hour"].notna().sum()
    assert discounts["saving %"].between(0, 100).all()


def _corrupt(tmp_path, name, edit):
    """A copy of the data file ``name`` with ``edit(lines)`` applied; returns its path."""
    lines = data_file(name).read_text(encoding="utf-8").splitlines()
    path = tmp_path / name
    path.write_text("\n".join(edit(lines)) + "\n", encoding="utf-8")
    return path


def _set(lines, line_number, column, value):
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
        ("spot_per_hour", "free", "must be a number"),
        ("gpus", "two", "must be an int >= 1"),
        ("gpus", "0", "must be an int >= 1"),
        ("instance", " ", "must not be empty"),
        ("gpu_memory_gib", "0", "must be a finite number > 0"),
    ],
)
def test_the_loader_names_the_bad_line_and_column(tmp_path, column, value, reason):
    path = _corrupt(tmp_path, "instance_prices.csv", lambda ls: _set(ls, 3, column, value))
    with pytest.raises(ValueError, match=rf"line 3, column '{column}': {reason}"):
        load_snapshot(path)


def test_the_loader_refuses_untraced_repeated_and_malformed_rows(tmp_path):
    untraced = _corrupt(tmp_path, "instance_prices.csv", lambda ls: _set(ls, 4, "source", "web"))
    with pytest.raises(ValueError, match="line 4, column 'source': must name the row of its cloud"):
        load_snapshot(untraced)
    repeated = _corrupt(tmp_path, "instance_prices.csv", lambda ls: ls[:3] + [ls[1]] + ls[3:])
    with pytest.raises(ValueError, match="line 4: .* repeats line 2"):
        load_snapshot(repeated)
    no_column = _corrupt(tmp_path, "instance_prices.csv",
                         lambda ls: [line.rsplit(",", 1)[0] for line in ls])  # fmt: skip
    with pytest.raises(ValueError, match="line 1: the columns must be"):
        load_snapshot(no_column)
    bad_commit = _corrupt(tmp_path, "instance_prices_sources.csv",
                          lambda ls: _set(ls, 2, "commit", "be265a9"))  # fmt: skip
    with pytest.raises(ValueError, match="line 2, column 'commit': must be a 40-hex-digit"):
        load_sources(bad_commit)
    swapped = _corrupt(tmp_path, "instance_price_history.csv",
                       lambda ls: _set(ls, 2, "spot_low_per_hour", "1e6"))  # fmt: skip
    with pytest.raises(ValueError, match="line 2: spot prices must satisfy low <= median <= high"):
        load_price_history(swapped)


def test_history_covers_a_year_of_daily_versions():
    history = load_price_history()
    aws = history[(history["cloud"] == "aws") & (history["instance"] == "p4d.24xlarge")]
    assert len(aws) > 300
    assert (aws["date"].diff().dropna() >= pd.Timedelta(days=1)).all()
    assert np.isfinite(aws["spot_median_per_hour"]).all()
