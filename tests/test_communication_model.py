"""Tests of chapter20.techniques.communication_model: the ring all-reduce's bytes and alpha-beta
time, the fit of alpha and beta, the hierarchical all-reduce and the scaling model (§20.1.1,
§20.4), and that §20.5's cost model uses the same model."""

import pandas as pd
import pytest

from chapter20.techniques.communication_model import (
    LINKS,
    fit_alpha_beta,
    hierarchical_allreduce_seconds,
    ring_allreduce_bytes,
    ring_allreduce_seconds,
    scaling_efficiency,
    scaling_model,
)


def test_alpha_beta_fit_recovers_known_parameters():
    sizes = [2**k for k in range(10, 24, 2)]
    times = [ring_allreduce_seconds(n, 4, latency=50e-6, bandwidth=2e9) for n in sizes]
    alpha, beta = fit_alpha_beta(pd.DataFrame({"bytes": sizes, "seconds": times, "world_size": 4}))
    assert alpha == pytest.approx(50e-6, rel=1e-6)
    assert 1 / beta == pytest.approx(2e9, rel=1e-6)
    assert ring_allreduce_seconds(1e9, 1, 1.0, 1.0) == 0.0


def test_scaling_model_loses_efficiency_with_slower_links_and_more_gpus():
    fast = scaling_model(440e6, 0.3, inter_node="InfiniBand HDR 200 Gb/s")
    slow = scaling_model(440e6, 0.3, inter_node="Ethernet 100 Gb/s")
    assert (fast["efficiency"] >= slow["efficiency"]).all()
    assert fast["efficiency"].is_monotonic_decreasing
    hidden = scaling_model(440e6, 0.3, overlap=1.0)
    assert (hidden["efficiency"] == 1.0).all()  # all communication behind the backward


def test_ring_allreduce_bytes_formula():
    assert ring_allreduce_bytes(1000, 1) == 0
    assert ring_allreduce_bytes(1000, 2) == 1000
    assert ring_allreduce_bytes(1000, 4) == 1500
    assert ring_allreduce_bytes(1000, 64) < 2000  # per rank it never reaches 2x the tensor


def test_fit_alpha_beta_through_two_sizes_is_the_line_through_both():
    # overlap_on_rank (notebook 12) fits alpha and beta to the medians of two message sizes
    sizes, world = (4096, 1 << 22), 2
    times = [ring_allreduce_seconds(n, world, latency=80e-6, bandwidth=1e9) for n in sizes]
    alpha, beta = fit_alpha_beta(pd.DataFrame({"bytes": sizes, "seconds": times, "W": world}))
    assert alpha == pytest.approx(80e-6, rel=1e-9) and 1 / beta == pytest.approx(1e9, rel=1e-9)
    with pytest.raises(ValueError, match="two or more"):
        fit_alpha_beta(pd.DataFrame({"bytes": [1], "seconds": [1.0], "W": [2]}))


def test_hierarchical_allreduce_is_a_ring_in_the_node_then_a_ring_over_the_nodes():
    nvlink, network = (3e-6, 300e9), (5e-6, 25e9)
    both = hierarchical_allreduce_seconds(440e6, 8, 4, gpu_link=nvlink, network=network)
    inner = ring_allreduce_seconds(440e6, 8, *nvlink)
    assert both == inner + ring_allreduce_seconds(440e6 / 8, 4, *network)
    # a link the run does not use may be missing; one it needs may not
    assert hierarchical_allreduce_seconds(440e6, 8, 1, gpu_link=nvlink, network=None) == inner
    assert hierarchical_allreduce_seconds(440e6, 1, 1, gpu_link=None, network=None) == 0.0
    with pytest.raises(ValueError, match="network"):
        hierarchical_allreduce_seconds(440e6, 8, 2, gpu_link=nvlink, network=None)


def test_scaling_efficiency_is_compute_over_compute_plus_exposed_communication():
    assert scaling_efficiency(0.3, 0.1) == pytest.approx(0.75)
    assert scaling_efficiency(0.3, 0.1, overlap=0.5) == pytest.approx(0.3 / 0.35)
    assert scaling_efficiency(0.3, 0.1, overlap=1.0) == 1.0
    with pytest.raises(ValueError, match="overlap"):
        scaling_efficiency(0.3, 0.1, overlap=1.5)
    with pytest.raises(ValueError, match="inter_node"):
        scaling_model(440e6, 0.3, inter_node="carrier pigeon")


def test_the_nvlink_bandwidth_of_links_is_the_datasheet_figure_the_cost_model_reads():
    from chapter20.cost.hardware import gpu_link_gb_s

    # both per GPU and direction (the datasheet's 600 GB/s is both directions together)
    assert LINKS["NVLink (A100)"]["bandwidth"] == gpu_link_gb_s("A100") * 1e9


def test_the_reference_ring_sums_every_ranks_tensor_and_sends_2_w_minus_1_over_w():
    """The written-out ring of §20.4 equals the sum on every rank (float32 rounding: another
    order of additions), in 2(W-1) steps, each rank sending ring_allreduce_bytes' share."""
    import torch

    from chapter20.techniques.communication_model import (
        ring_allreduce_bytes,
        ring_allreduce_reference,
    )

    for world in (1, 2, 3, 5):
        tensors = [
            torch.randn(6, 10, generator=torch.Generator().manual_seed(r)) for r in range(world)
        ]
        results, log = ring_allreduce_reference(tensors)
        total = torch.stack(tensors).sum(dim=0)
        assert all(torch.allclose(r, total, atol=1e-5) and r.shape == (6, 10) for r in results)
        assert len(log) == 2 * (world - 1)
        sent = sum(
            len(tensors[0].flatten().tensor_split(world)[c]) for _, s in log for r, c in s if r == 0
        )
        assert sent == ring_allreduce_bytes(60, world)  # 60 values: W divides them
