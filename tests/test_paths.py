"""chapter20.paths: where the companion reads and writes."""

import pytest

from chapter20 import paths


def test_cache_dir_from_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("CHAPTER20_CACHE", str(tmp_path / "c"))
    assert paths.cache_dir() == tmp_path / "c"
    assert (tmp_path / "c").is_dir()


def test_results_dir_from_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("CHAPTER20_RESULTS", str(tmp_path / "r"))
    assert paths.results_dir() == tmp_path / "r"


def test_results_dir_in_a_checkout(monkeypatch):
    monkeypatch.delenv("CHAPTER20_RESULTS", raising=False)
    root = paths.repo_root()
    assert root is not None and (root / "pyproject.toml").is_file()
    assert paths.results_dir() == root / "build" / "claims"


def test_data_file():
    assert paths.data_file("claims.csv").name == "claims.csv"
    with pytest.raises(FileNotFoundError, match="no_such_file"):
        paths.data_file("no_such_file.csv")
