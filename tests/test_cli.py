"""Tests for ``python -m chapter20`` (chapter20/__main__.py): env, bench, audit."""

import re

import pytest
import torch

from chapter20.__main__ import BENCHMARKS, main
from chapter20.claims import NOT_YET_MEASURED, ClaimsLog


def test_env_reports_ok(capsys):
    assert main(["env"]) == 0
    out = capsys.readouterr().out
    assert re.search(rf"^\[OK\]\s+torch {re.escape(torch.__version__)}$", out, re.MULTILINE)
    assert re.search(r"^\[OK\]\s+python ", out, re.MULTILINE)
    assert "[FAIL]" not in out
    assert "device: " in out and "distributed backend: " in out
    assert "all dependencies OK" in out


def test_bench_lists_benchmarks(capsys):
    assert main(["bench"]) == 0
    captured = capsys.readouterr()
    assert "benchmarks:" in captured.out
    assert "step-memory" in captured.out
    assert set(BENCHMARKS) <= set(re.findall(r"^\s+(\S+)", captured.out, re.MULTILINE))
    assert captured.err == ""


def test_bench_unknown_name(capsys):
    assert main(["bench", "nope"]) == 2
    captured = capsys.readouterr()
    assert "unknown benchmark 'nope'" in captured.err
    assert "step-memory" in captured.out  # the list of valid names is shown


def test_audit_empty_results(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("CHAPTER20_RESULTS", str(tmp_path))
    assert main(["audit"]) == 0
    out = capsys.readouterr().out
    for i in range(1, 31):
        assert re.search(rf"^\s*C{i:02d}\s", out, re.MULTILINE), f"C{i:02d} missing"
    assert out.count(NOT_YET_MEASURED) >= 30
    assert f"{NOT_YET_MEASURED}: 30" in out
    assert "0 row(s) measured" in out
    assert str(tmp_path) in out


def test_audit_shows_recorded_verdict(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("CHAPTER20_RESULTS", str(tmp_path))
    ClaimsLog("00_overview").check("C11", 3.0)
    assert main(["audit"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^\s*C11\s.*\bholds\b.*00_overview", out, re.MULTILINE)
    assert f"{NOT_YET_MEASURED}: 29" in out
    assert "1 row(s) measured" in out


def test_no_command_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exc:
        main([])
    assert exc.value.code == 2
    assert "usage" in capsys.readouterr().err
