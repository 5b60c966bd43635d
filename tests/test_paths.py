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


def test_atomic_torch_save_writes_whole_files_only(tmp_path, monkeypatch):
    import torch

    from chapter20.paths import atomic_torch_save

    path = atomic_torch_save({"x": torch.arange(3)}, tmp_path / "sub" / "state.pt")
    assert torch.equal(torch.load(path)["x"], torch.arange(3))

    def crash(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", crash)
    with pytest.raises(OSError, match="disk full"):
        atomic_torch_save({"x": 1}, path)
    assert torch.equal(torch.load(path)["x"], torch.arange(3))  # the old file is intact
    assert [p.name for p in path.parent.iterdir()] == ["state.pt"]  # no temporary left
