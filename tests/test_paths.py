"""chapter20.core.paths: where the companion reads and writes."""

import re

import pytest

from chapter20.core import paths


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
    assert paths.data_file("claims.csv").parent == paths.repo_root() / "data"
    with pytest.raises(FileNotFoundError, match="no_such_file"):
        paths.data_file("no_such_file.csv")
    with pytest.raises(ValueError, match="bare file name"):
        paths.data_file("../pyproject.toml")


def test_every_data_file_the_code_names_is_in_data():
    """Data lives in the top-level data/ only (pyproject.toml ships it in the wheel as
    chapter20/data/): no data folder inside the package, and every data_file("...") in the
    package names a file that exists."""
    package = paths.repo_root() / "chapter20"
    assert not (package / "data").exists(), "data files belong in the top-level data/"
    named = set()
    for module in package.rglob("*.py"):
        named |= set(re.findall(r"data_file\(\s*[\"']([^\"']+)[\"']", module.read_text()))
    assert {"claims.csv", "instance_prices.csv"} <= named
    for name in named:
        assert paths.data_file(name).is_file(), name


def test_atomic_torch_save_writes_whole_files_only(tmp_path, monkeypatch):
    import torch

    from chapter20.core.paths import atomic_torch_save

    path = atomic_torch_save({"x": torch.arange(3)}, tmp_path / "sub" / "state.pt")
    assert torch.equal(torch.load(path)["x"], torch.arange(3))

    def crash(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", crash)
    with pytest.raises(OSError, match="disk full"):
        atomic_torch_save({"x": 1}, path)
    assert torch.equal(torch.load(path)["x"], torch.arange(3))  # the old file is intact
    assert [p.name for p in path.parent.iterdir()] == ["state.pt"]  # no temporary left
