"""§20.5.1 The snapshot's builder (chapter20.cost.catalog_build), on a fixture of real lines.

``tests/fixtures/skypilot_catalog`` holds real lines of SkyPilot's catalog files at six real
commits (its README says which). The fixture below commits them into a fresh git repository at
their real commit times; the builder, run on it, must give exactly the committed rows of
``data/instance_prices.csv`` and ``data/instance_price_history.csv`` for those lines: the
committed data are what the builder makes of the real files, and each history row names the
real commit it was read from. No network: the repository is built here.
"""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from chapter20.core.paths import data_file
from chapter20.cost.catalog_build import (
    HISTORY_FIELDS,
    PRICE_FIELDS,
    Mirror,
    build_history,
    build_snapshot,
    main,
    reduce_rows,
)

FIXTURE = Path(__file__).parent / "fixtures" / "skypilot_catalog"
pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs the git program")


def _versions() -> list[dict]:
    with open(FIXTURE / "versions.csv", newline="") as fh:
        return list(csv.DictReader(fh))


def _git(repo: Path, *args: str, when: str | None = None) -> None:
    env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(repo)}
    if when:
        env |= {"GIT_AUTHOR_DATE": when, "GIT_COMMITTER_DATE": when}
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=replay",
                    "-c", "user.email=replay@example.invalid", *args],
                   check=True, capture_output=True, env=env)  # fmt: skip


@pytest.fixture(scope="module")
def replay(tmp_path_factory) -> Path:
    """A git repository with the fixture's files committed in the order and at the times of
    their real commits (one replayed commit per real one)."""
    repo = tmp_path_factory.mktemp("catalog-replay")
    _git(repo, "init", "-q")
    for version in _versions():
        source = FIXTURE / version["commit"][:12] / version["path"]
        target = repo / version["path"]
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
        _git(repo, "add", version["path"])
        _git(repo, "commit", "-q", "-m", f"replay of {version['commit']}",
             when=version["commit_time_iso"])  # fmt: skip
    return repo


def _committed(name: str) -> pd.DataFrame:
    return pd.read_csv(data_file(name), dtype=str, keep_default_na=False)


def test_the_builder_gives_the_committed_snapshot_rows_for_the_real_lines(replay):
    prices, sources = build_snapshot(Mirror(replay), "HEAD")
    assert tuple(prices.columns) == PRICE_FIELDS
    committed = _committed("instance_prices.csv")
    key = ["cloud", "instance", "region", "zone"]
    merged = prices.merge(committed, on=key, how="left", suffixes=("", " committed"),
                          indicator=True)  # fmt: skip
    assert (merged["_merge"] == "both").all(), merged.loc[merged["_merge"] != "both", key]
    for column in set(PRICE_FIELDS) - set(key):
        assert (merged[column] == merged[f"{column} committed"]).all(), column
    # the fixture's non-GPU and unpriced lines are dropped
    assert not {"m5.large", "inf1.xlarge", "n1-standard-8"} & set(prices["instance"])
    assert set(prices["instance"]) >= {"p4d.24xlarge", "a2-highgpu-8g", "gpu_8x_a100"}
    # sources: the dates and paths of the real commits the committed sources name
    real = _committed("instance_prices_sources.csv").set_index("source")
    for row in sources.itertuples():
        assert (row.path, row.commit_date) == (real.loc[row.source, "path"],
                                               real.loc[row.source, "commit_date"])  # fmt: skip
        assert len(row.commit) == len(row.blob) == 40
        assert int(row.rows_kept) == int((prices["cloud"] == row.source).sum())


def test_the_builder_gives_the_committed_history_rows_for_the_replayed_days(replay):
    history = build_history(Mirror(replay), "HEAD")
    assert tuple(history.columns) == HISTORY_FIELDS and len(history) > 0
    committed = _committed("instance_price_history.csv")
    key = ["cloud", "instance", "region", "date"]
    merged = history.merge(committed, on=key, how="left", suffixes=("", " committed"),
                           indicator=True)  # fmt: skip
    assert (merged["_merge"] == "both").all()
    for column in set(HISTORY_FIELDS) - set(key) - {"commit"}:
        assert (merged[column] == merged[f"{column} committed"]).all(), column
    # each committed row of a replayed day names the real commit its lines come from
    real = {(v["path"].split("/")[2], v["commit_time_iso"]): v["commit"] for v in _versions()}
    days = {(c, pd.Timestamp(t).tz_convert("UTC").strftime("%Y-%m-%d")): h
            for (c, t), h in real.items()}  # fmt: skip
    expected = merged.apply(lambda r: days[(r["cloud"], r["date"])], axis=1)
    assert (merged["commit committed"] == expected).all()
    assert {"2022-12-02", "2023-07-26", "2023-12-13"} <= set(history["date"])


def test_gcp_machines_are_priced_with_their_gpus_in_the_same_zone():
    text = (FIXTURE / "7e5556f6711e" / "catalogs/v5/gcp/vms.csv").read_text()
    table = pd.read_csv(FIXTURE / "7e5556f6711e" / "catalogs/v5/gcp/vms.csv")
    rows, read = reduce_rows(text, "gcp")
    assert read == len(table)
    vm = table[table["InstanceType"] == "a2-highgpu-8g"].set_index("AvailabilityZone")
    gpus = table[(table["AcceleratorName"] == "A100") & (table["AcceleratorCount"] == 8)]
    gpus = gpus.set_index("AvailabilityZone")
    for row in (r for r in rows if r["instance"] == "a2-highgpu-8g"):
        zone = row["zone"]
        assert float(row["on_demand_per_hour"]) == pytest.approx(
            vm.loc[zone, "Price"] + gpus.loc[zone, "Price"], abs=1e-6
        )
        assert (row["gpu_model"], row["gpus"]) == ("A100", "8")
    assert {r["instance"] for r in rows} == {"a2-highgpu-8g", "a2-ultragpu-1g"}


def test_the_command_writes_three_files(replay, tmp_path, capsys):
    assert main(["--mirror", str(replay), "--out", str(tmp_path), "--mirror-label", "replay"]) == 0
    written = sorted(p.name for p in tmp_path.iterdir())
    assert written == ["instance_price_history.csv", "instance_prices.csv",
                       "instance_prices_sources.csv"]  # fmt: skip
    assert "wrote" in capsys.readouterr().out
    sources = pd.read_csv(tmp_path / "instance_prices_sources.csv")
    assert set(sources["mirror"]) == {"replay"}


@pytest.mark.parametrize(
    "args, message",
    [
        (["--mirror", "/no/such/folder"], "mirror must be a git directory"),
        (["--rev", "no-such-rev"], "rev must be a revision of the mirror"),
        (["--schema", "v9"], "schema must be one of ['v5']"),
        (["--out", "/no/such/folder"], "out must be an existing folder"),
    ],
)
def test_bad_arguments_end_with_one_line_and_status_2(replay, tmp_path, capsys, args, message):
    base = {"--mirror": str(replay), "--out": str(tmp_path)}
    given = dict(zip(args[::2], args[1::2]))
    argv = [part for flag, value in {**base, **given}.items() for part in (flag, value)]
    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0] and "Traceback" not in err[0]


def test_a_folder_that_is_not_a_git_directory_is_refused(tmp_path):
    with pytest.raises(ValueError, match="mirror must be a git directory"):
        Mirror(tmp_path)
    with pytest.raises(ValueError, match="cloud must be one of"):
        reduce_rows("InstanceType\n", "azure")
