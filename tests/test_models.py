"""Tests for chapter20.core.models: shapes, padding, id validation, gradients, seeding,
arguments."""

import pytest
import torch

from chapter20.core.device import set_seed
from chapter20.core.models import BagOfEmbeddingsEncoder, TransformerEncoder, count_parameters

VOCAB = 30


def bag(seed=0, **kwargs):
    set_seed(seed)
    return BagOfEmbeddingsEncoder(VOCAB, **{"embedding_dim": 8, "output_dim": 6, **kwargs})


def transformer(seed=0, **kwargs):
    set_seed(seed)
    config = {"d_model": 16, "n_heads": 4, "n_layers": 2, "max_len": 12, "output_dim": 5}
    return TransformerEncoder(VOCAB, **{**config, **kwargs})


MODELS = {"bag": bag, "transformer": transformer}


@pytest.fixture(params=sorted(MODELS))
def make(request):
    return MODELS[request.param]


IDS = torch.tensor([[3, 4, 5, 0], [6, 7, 0, 0], [1, 2, 3, 4]])


# --- shapes ----------------------------------------------------------------------------------


def test_bag_output_shape():
    assert bag()(IDS).shape == (3, 6)
    assert BagOfEmbeddingsEncoder(VOCAB, 8)(IDS).shape == (3, 8)  # output_dim defaults to dim


def test_transformer_output_shape():
    assert transformer()(IDS).shape == (3, 5)
    assert transformer(output_dim=None)(IDS).shape == (3, 16)  # no projection: d_model
    assert transformer()(torch.ones(2, 12, dtype=torch.long)).shape == (2, 5)  # length == max_len


# --- padding ---------------------------------------------------------------------------------


def test_bag_excludes_padding_from_the_mean():
    model = bag()
    padded = model(torch.tensor([[5, 7, 0, 0], [1, 2, 3, 4]]))
    plain = model(torch.tensor([[5, 7], [1, 2]]))
    # Bitwise: both bags sum the same two rows in the same order and divide by the same count 2.
    assert torch.equal(padded[0], plain[0])
    # And the padding row really would have changed the mean had it been counted.
    assert not torch.equal(padded[0], model(torch.tensor([[5, 7, 8, 9]]))[0])


def test_bag_mean_matches_hand_computation():
    model = bag()
    table = model.embedding.weight
    expected = model.projection((table[5] + table[7]) / 2)
    # float32 tolerance: the kernel and the hand sum may round differently in the last bit.
    torch.testing.assert_close(model(torch.tensor([[5, 0, 7]]))[0], expected, rtol=1e-6, atol=1e-6)


def test_transformer_eval_invariant_to_extra_padding():
    model = transformer().eval()
    ids = torch.tensor([[3, 4, 5], [6, 7, 0]])
    short = model(ids)
    long = model(torch.cat([ids, torch.zeros(2, 5, dtype=torch.long)], dim=1))
    # Masked attention and the masked mean make padding columns irrelevant, but the softmax and
    # the sums reduce over different lengths (padded scores are -inf, padded rows are 0), so
    # float32 rounding may differ: 1e-5.
    torch.testing.assert_close(long, short, rtol=1e-5, atol=1e-5)


def test_transformer_padding_is_masked_not_ignored_by_position():
    model = transformer().eval()
    # A padding token in the middle is masked too, so [3, 0, 4] differs from [3, 4] only through
    # the position of the 4: the outputs must differ (positions matter).
    a = model(torch.tensor([[3, 0, 4]]))
    b = model(torch.tensor([[3, 4]]))
    assert not torch.allclose(a, b)


# --- id validation ---------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [VOCAB, VOCAB + 7, -1, -3])
def test_out_of_range_ids_raise(make, bad):
    ids = torch.tensor([[1, 2], [3, bad]])
    with pytest.raises(IndexError, match=rf"contains {bad}\b"):
        make()(ids)


def test_float_ids_raise(make):
    with pytest.raises(TypeError, match="integer dtype"):
        make()(IDS.float())


def test_bool_ids_raise(make):
    with pytest.raises(TypeError, match="integer dtype"):
        make()(IDS > 2)


def test_non_tensor_ids_raise(make):
    with pytest.raises(TypeError, match="torch.Tensor"):
        make()([[1, 2, 3]])


@pytest.mark.parametrize("shape", [(4,), (2, 2, 2)])
def test_ids_must_be_2d(make, shape):
    with pytest.raises(ValueError, match="ids must be"):
        make()(torch.ones(shape, dtype=torch.long))


def test_transformer_row_of_only_padding_raises():
    with pytest.raises(ValueError, match="non-padding"):
        transformer()(torch.tensor([[1, 2], [0, 0]]))


def test_bag_row_of_only_padding_raises():
    with pytest.raises(ValueError, match="non-padding"):
        bag()(torch.tensor([[1, 2], [0, 0]]))


def test_transformer_too_long_raises():
    with pytest.raises(ValueError, match="max_len=12"):
        transformer()(torch.ones(1, 13, dtype=torch.long))


# --- gradients -------------------------------------------------------------------------------


def test_every_parameter_gets_a_gradient(make):
    model = make().train()
    model(IDS).pow(2).sum().backward()
    for name, param in model.named_parameters():
        assert param.grad is not None, name
    if isinstance(model, BagOfEmbeddingsEncoder):
        embedding = model.embedding
    else:
        embedding = model.token_embedding
    # The padding row gets exactly zero gradient; a used row gets a nonzero one.
    assert torch.count_nonzero(embedding.weight.grad[0]) == 0
    assert torch.count_nonzero(embedding.weight.grad[3]) > 0
    # Rows never looked up get zero gradient too, rows that were get some.
    assert torch.count_nonzero(embedding.weight.grad[29]) == 0


def test_bag_sparse_gradient():
    model = bag(sparse=True)
    model(IDS).sum().backward()
    grad = model.embedding.weight.grad
    assert grad.is_sparse
    assert set(grad.coalesce().indices()[0].tolist()) <= {1, 2, 3, 4, 5, 6, 7}


# --- seeding, arguments, parameter count -----------------------------------------------------


def test_same_seed_same_parameters(make):
    a, b = make(), make()
    for (name, pa), (_, pb) in zip(a.named_parameters(), b.named_parameters()):
        assert torch.equal(pa, pb), name
    other = make(seed=1)
    assert not any(
        torch.equal(pa, pc)
        for pa, pc in zip(a.parameters(), other.parameters())
        if pa.numel() > 1 and pa.std() > 0
    )


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"vocab_size": 0}, "vocab_size"),
        ({"vocab_size": 10, "d_model": 10, "n_heads": 3}, "n_heads"),
        ({"vocab_size": 10, "dropout": 1.0}, "dropout"),
        ({"vocab_size": 10, "dropout": -0.1}, "dropout"),
        ({"vocab_size": 10, "padding_idx": 10}, "padding_idx"),
        ({"vocab_size": 10, "padding_idx": -1}, "padding_idx"),
        ({"vocab_size": 10, "n_layers": 0}, "n_layers"),
        ({"vocab_size": 10, "max_len": 0}, "max_len"),
        ({"vocab_size": 10, "output_dim": 0}, "output_dim"),
    ],
)
def test_transformer_bad_arguments(kwargs, name):
    with pytest.raises(ValueError, match=name):
        TransformerEncoder(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"vocab_size": 0}, "vocab_size"),
        ({"vocab_size": 10, "embedding_dim": 0}, "embedding_dim"),
        ({"vocab_size": 10, "output_dim": 0}, "output_dim"),
        ({"vocab_size": 10, "padding_idx": 10}, "padding_idx"),
        ({"vocab_size": 10, "padding_idx": -1}, "padding_idx"),
    ],
)
def test_bag_bad_arguments(kwargs, name):
    with pytest.raises(ValueError, match=name):
        BagOfEmbeddingsEncoder(**kwargs)


def test_non_int_arguments_raise_type_error():
    with pytest.raises(TypeError, match="vocab_size"):
        BagOfEmbeddingsEncoder(10.0)
    with pytest.raises(TypeError, match="d_model"):
        TransformerEncoder(10, d_model=True)


def test_count_parameters_bag():
    # table 30x8, projection 8x6 + 6.
    assert count_parameters(bag()) == 30 * 8 + 8 * 6 + 6


def test_count_parameters_transformer():
    V, d, f, M, L, out = VOCAB, 16, 64, 12, 2, 5
    attention = 2 * d + (d * 3 * d + 3 * d) + (d * d + d)  # LayerNorm, qkv, out
    feed_forward = 2 * d + (d * f + f) + (f * d + d)  # LayerNorm, up, down
    per_layer = attention + feed_forward
    expected = V * d + M * d + L * per_layer + 2 * d + d * out + out
    assert count_parameters(transformer()) == expected


def test_count_parameters_shared_once():
    model = torch.nn.Sequential(torch.nn.Embedding(10, 4), torch.nn.Linear(4, 10, bias=False))
    model[1].weight = model[0].weight
    assert count_parameters(model) == 40


def test_weighted_bag_is_the_weighted_mean_of_token_rows():
    from chapter20.core.models import WeightedBagEncoder

    torch.manual_seed(0)
    weights = torch.tensor([1.0, 1.0, 2.0, 0.5, 4.0])
    model = WeightedBagEncoder(5, 3, token_weights=weights)
    ids = torch.tensor([[2, 3, 0], [4, 4, 2]])
    table = model.embedding.weight.detach()
    expected0 = (2 * table[2] + 0.5 * table[3]) / 2.5
    expected1 = (4 * table[4] * 2 + 2 * table[2]) / 10
    out = model(ids)
    torch.testing.assert_close(out, torch.stack([expected0, expected1]))
    out.sum().backward()
    assert model.log_weight.grad[[2, 3, 4]].abs().min() > 0  # the weights learn
    assert model.embedding.weight.grad[0].abs().max() == 0  # padding gets no gradient


def test_weighted_bag_checks():
    from chapter20.core.models import WeightedBagEncoder

    with pytest.raises(ValueError, match="token_weights"):
        WeightedBagEncoder(4, 2, token_weights=torch.tensor([0.0, 1.0, 0.0, 1.0]))
    with pytest.raises(ValueError, match="shape"):
        WeightedBagEncoder(4, 2, token_weights=torch.ones(3))
    model = WeightedBagEncoder(4, 2, learn_weights=False)
    assert not model.log_weight.requires_grad
    with pytest.raises(IndexError):
        model(torch.tensor([[1, 4]]))
    with pytest.raises(ValueError, match="non-padding"):
        model(torch.tensor([[1, 2], [0, 0]]))
