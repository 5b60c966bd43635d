"""``chapter20 audit --criteria`` (chapter20/cli/main.py): each claim's criterion in one line."""

from chapter20.cli.main import main
from chapter20.core.claims import load_claims


def test_audit_prints_each_criterion_in_one_line(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("CHAPTER20_RESULTS", str(tmp_path))
    assert main(["audit", "--criteria"]) == 0
    lines = capsys.readouterr().out.splitlines()
    claims = load_claims()
    for claim in claims.values():
        found = [line for line in lines if line.startswith(f"{claim.id:<4} {claim.criterion}")]
        assert len(found) == 1, claim.id
        assert found[0].endswith(f"[{claim.comparison()}]")
