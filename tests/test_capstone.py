"""Tests of chapter20.capstone.recipe (the §20.6 recipe) and chapter20.training.encoder_file (the
encoder file)."""

from dataclasses import replace

import numpy as np
import pytest
import torch

from chapter20.capstone import recipe as capstone
from chapter20.capstone.evaluation import LEE_INTER_RATER
from chapter20.training.encoder_file import load_encoder, save_encoder

SMALL = dict(sources=("lee",), dim=16, vocab_size=3_000, seed=0)


@pytest.fixture(scope="module")
def setup():
    return capstone.build_encoder(capstone.EncoderRecipe(**SMALL))


def test_lsa_start_is_already_a_document_model(setup):
    retrieval = (["the fire spread"] * 3, ["rain today", "cricket match", "fire"])
    scores = capstone.evaluate_encoder(setup.text_encoder().encode, retrieval)
    assert 0.2 < scores["lee_pearson"] < LEE_INTER_RATER  # LSA of 300 news documents, untrained
    assert scores["chance@1"] == pytest.approx(1 / 3)


def test_recipe_checks():
    with pytest.raises(ValueError, match="init"):
        capstone.EncoderRecipe(init="glove")
    with pytest.raises(ValueError, match="sources"):
        capstone.EncoderRecipe(sources=())
    with pytest.raises(ValueError, match="idf"):
        capstone.EncoderRecipe(model="transformer")
    with pytest.raises(ValueError, match="max_span"):
        capstone.EncoderRecipe(min_span=10, max_span=5)


def test_train_encoder_lowers_the_loss_and_reports_every_evaluation():
    setup = capstone.build_encoder(capstone.EncoderRecipe(**SMALL, init="random"))
    retrieval = (["police said the fire"] * 4, ["fire", "rain", "cricket", "senate"])
    run = replace(capstone.RECIPE_RUN, steps=4, batch=64,
                  training=replace(capstone.RECIPE_TRAINING, lr=1e-2))  # fmt: skip
    records = capstone.train_encoder(setup, run, retrieval=retrieval)
    assert [r["step"] for r in records] == [0, 4]
    assert records[-1]["loss"] < np.log(64)  # better than a uniform guess among 64
    assert all(-1 <= r["lee_pearson"] <= 1 for r in records)


def test_transformer_recipe_builds_and_encodes():
    setup = capstone.build_encoder(
        capstone.EncoderRecipe(**SMALL, model="transformer", idf=False, max_span=24, layers=1)
    )
    out = setup.text_encoder().encode(["a fire near sydney", "the senate"])
    assert out.shape == (2, 16)


def test_saved_encoder_loads_without_training_state_and_encodes_the_same(setup, tmp_path):
    path = setup.save(tmp_path / "encoder.pt", {"note": "test"})
    loaded = load_encoder(path)
    texts = ["Bushfires near Sydney", "The Democrats chose a leader", "cricket"]
    expected = setup.text_encoder().encode(texts)
    got = loaded.encode(texts)
    assert got.dtype == torch.float32 and got.device.type == "cpu"
    torch.testing.assert_close(got, expected, rtol=0, atol=0)
    torch.testing.assert_close(got.norm(dim=1), torch.ones(3))
    assert loaded.metadata["note"] == "test" and loaded.metadata["recipe"]["dim"] == 16
    assert loaded.dim == 16


def test_encode_rejects_bad_input(setup):
    encoder = setup.text_encoder()
    with pytest.raises(ValueError, match="empty"):
        encoder.encode([])
    with pytest.raises(TypeError, match=r"texts\[1\]"):
        encoder.encode(["fine", 3])
    with pytest.raises(TypeError, match="list of str"):
        encoder.encode("a bare string")
    with pytest.raises(ValueError, match=r"texts\[0\] has no word"):
        encoder.encode(["!!! 42"])


def test_load_encoder_refuses_other_files(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_encoder(tmp_path / "missing.pt")
    torch.save({"model": {}}, tmp_path / "checkpoint.pt")
    with pytest.raises(ValueError, match="not a chapter20 encoder"):
        load_encoder(tmp_path / "checkpoint.pt")
    with pytest.raises(TypeError, match="model must be"):
        save_encoder(tmp_path / "x.pt", torch.nn.Linear(2, 2), None, {})


def test_a_second_build_of_the_same_lsa_start_reuses_its_rows_exactly(setup):
    """The LSA rows are kept for the next build of the same start (the SVD is the costly part);
    the second build's table equals the first's, and so does the global random state after."""
    torch.manual_seed(5)
    again = capstone.build_encoder(capstone.EncoderRecipe(**SMALL))
    after_kept = torch.rand(3)
    capstone._lsa_rows.cache_clear()
    torch.manual_seed(5)
    fresh = capstone.build_encoder(capstone.EncoderRecipe(**SMALL))
    assert torch.equal(torch.rand(3), after_kept)
    for model in (again.model, fresh.model):
        assert torch.equal(model.embedding.weight, setup.model.embedding.weight)
