"""Tests for ``chapter20`` / ``python -m chapter20`` (chapter20/cli/main.py): env, bench, audit."""

import os
import re
import shlex

import pytest
import torch

from chapter20.cli.main import (
    BENCHMARKS,
    COMMANDS,
    benchmark_arguments,
    benchmark_parser,
    main,
    settings_lines,
)
from chapter20.core.claims import NOT_YET_MEASURED, ClaimsLog


def test_env_reports_ok(capsys):
    assert main(["env"]) == 0
    out = capsys.readouterr().out
    assert re.search(rf"^\[OK\]\s+torch {re.escape(torch.__version__)}$", out, re.MULTILINE)
    assert re.search(r"^\[OK\]\s+python ", out, re.MULTILINE)
    assert "[FAIL]" not in out
    assert "device: " in out and "distributed backend: " in out
    assert "all dependencies OK" in out


def test_train_passes_its_flags_to_the_training_script(capsys, monkeypatch, tmp_path):
    """``chapter20 train --output-dir ... --steps ...``: the flags reach scripts/train.py's
    parser (argparse alone would refuse them as unknown options of ``chapter20``), which
    creates the output directory before anything trains."""
    import chapter20.capstone.run as train

    seen = []
    out = str(tmp_path / "runs" / "x")
    monkeypatch.setattr(train, "main", seen.append)
    assert main(["train", "--output-dir", out, "--steps", "3", "--dim", "16"]) == 0
    assert seen == [["--output-dir", out, "--steps", "3", "--dim", "16"]]
    monkeypatch.undo()
    with pytest.raises(SystemExit) as exit_:
        main(["train", "--help"])
    usage = capsys.readouterr().out
    assert exit_.value.code == 0 and "--output-dir" in usage
    assert "--sharded-table" in usage  # from TrainConfig.sharded_table, like every step option
    config, _ = train.parse_args(seen[0])
    assert (config.output_dir, config.steps, config.dim) == (out, 3, 16)
    assert (tmp_path / "runs" / "x").is_dir()


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
    monkeypatch.setattr("chapter20.core.claims.RECORD_FILE", "no-record.json")  # no fallback
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
    monkeypatch.setattr("chapter20.core.claims.RECORD_FILE", "no-record.json")
    ClaimsLog("05_memory_efficient_optimizers").check("C12", 4.0)
    assert main(["audit"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^\s*C12\s.*\bholds\b.*05_memory_efficient_optimizers", out, re.MULTILINE)
    assert f"{NOT_YET_MEASURED}: 29" in out
    assert "1 row(s) measured: 1 read from" in out


def test_audit_falls_back_on_the_committed_record_and_says_so(capsys, monkeypatch, tmp_path):
    from chapter20.core import claims

    monkeypatch.setenv("CHAPTER20_RESULTS", str(tmp_path / "run"))
    record = tmp_path / "record.json"
    claims.write_record([claims.check("C04", 64e9, source="00_overview")], "a test machine", record)
    original = claims.read_record
    monkeypatch.setattr(claims, "read_record", lambda path=None: original(record))
    assert main(["audit"]) == 0
    out = capsys.readouterr().out
    assert "1 row(s) measured: 0 read from" in out
    assert "1 from the committed record" in out and "a test machine" in out


def test_no_command_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exc:
        main([])
    assert exc.value.code == 2
    assert "usage" in capsys.readouterr().err


def test_help_lists_every_command(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: chapter20")
    for name in COMMANDS:
        assert re.search(rf"^\s+{name}\s+\S", out, re.MULTILINE), f"{name} missing from --help"


def test_bench_help_shows_the_benchmark_size_options(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["bench", "contrastive", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "--batch BATCH" in out and "default: 512 x scale" in out and "--scale" in out


def test_bench_sizes_from_options_scale_and_environment(monkeypatch):
    monkeypatch.delenv("CHAPTER20_SCALE", raising=False)
    assert benchmark_arguments("contrastive", [])[1] == {"batch": 512, "chunk": 32}
    assert benchmark_arguments("contrastive", ["--batch", "64"])[1] == {"batch": 64, "chunk": 32}
    monkeypatch.setenv("CHAPTER20_SCALE", "0.5")
    assert benchmark_arguments("contrastive", [])[1] == {"batch": 256, "chunk": 16}
    _, kwargs, _ = benchmark_arguments("step-memory", ["--scale", "2"])
    assert kwargs == {"vocab_sizes": (20_000, 60_000, 200_000)}  # nb00.VOCAB_SIZES x 2
    assert os.environ["CHAPTER20_SCALE"] == "2.0"  # the library's scaled sizes follow --scale
    _, kwargs, _ = benchmark_arguments("step-memory", ["--vocab-sizes", "1_000,2000"])
    assert kwargs == {"vocab_sizes": (1000, 2000)}


def test_bench_repeats_are_not_sizes(monkeypatch):
    monkeypatch.setenv("CHAPTER20_SCALE", "4")
    kwargs = benchmark_arguments("word2vec", [])[1]
    assert kwargs["corpus"] == "wiki+lee" and kwargs["seeds"] == (1, 2, 3, 4, 5)


def test_bench_name_lists_keep_their_underscores_and_numbers_drop_theirs():
    names = ["--ours", "ours hierarchical,ours hierarchical-gensim_tree", "--seeds", "1_0,2"]
    kwargs = benchmark_arguments("word2vec", names)[1]
    assert kwargs["ours"] == ("ours hierarchical", "ours hierarchical-gensim_tree")
    assert kwargs["seeds"] == (10, 2)


@pytest.mark.parametrize("bad", [["--scale", "0"], ["--scale", "x"], ["--batch", "1.5"]])
def test_bench_rejects_bad_sizes(bad, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["bench", "contrastive", *bad])
    assert exc.value.code == 2
    assert "error: argument" in capsys.readouterr().err


def test_every_benchmark_takes_only_supported_options():
    for name in BENCHMARKS:
        parser, _ = benchmark_parser(name)  # raises TypeError for an unsupported annotation
        assert parser.prog == f"chapter20 bench {name}"


def test_bench_word2vec_takes_the_configurations_fields_as_options(capsys):
    from chapter20.word2vec.trainers import COMPARISON

    assert benchmark_arguments("word2vec", [])[1]["config"] == COMPARISON
    config = benchmark_arguments("word2vec", ["--dim", "50", "--no-fused"])[1]["config"]
    assert (config.dim, config.fused, config.workers) == (50, False, COMPARISON.workers)
    with pytest.raises(SystemExit) as exc:  # the configuration's own check, as a usage error
        benchmark_arguments("word2vec", ["--negative", "0"])
    assert exc.value.code == 2 and "negative must be an int >= 1" in capsys.readouterr().err


def test_the_printed_settings_are_options_that_rerun_the_benchmark(monkeypatch):
    monkeypatch.delenv("CHAPTER20_SCALE", raising=False)
    fn, kwargs, _ = benchmark_arguments("contrastive", ["--batch", "64"])
    assert settings_lines(fn, kwargs) == ["settings: --batch 64 --chunk 32"]
    fn, kwargs, _ = benchmark_arguments("word2vec", ["--seeds", "1,2", "--min-count", "3"])
    lines = settings_lines(fn, kwargs)
    assert lines[0].startswith("settings: --corpus wiki+lee --seeds 1,2 --ours 'ours negative,")
    assert lines[1].startswith("config (Word2VecConfig): --objective negative --dim 100 ")
    assert "--min-count 3" in lines[1] and "--batch-size none" in lines[1]
    options = shlex.split(" ".join(line.partition(": ")[2] for line in lines))
    assert benchmark_arguments("word2vec", options)[1] == kwargs  # every setting, read back


def _tiny_benchmark(size: int = 3) -> None:
    print(f"ran with {size}")


def test_bench_prints_its_settings_before_it_runs(capsys, monkeypatch):
    monkeypatch.delenv("CHAPTER20_SCALE", raising=False)
    monkeypatch.setitem(BENCHMARKS, "tiny", ("test_cli", "_tiny_benchmark", "a test's"))
    assert main(["bench", "tiny", "--scale", "2"]) == 0
    assert capsys.readouterr().out == "settings: --size 6\nran with 6\n"
