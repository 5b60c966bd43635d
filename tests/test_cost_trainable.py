"""chapter20.cost.trainable: which catalog GPUs PyTorch's CUDA build can train on, each
compute capability cited, each exclusion with its reason."""

from __future__ import annotations

import pandas as pd
import pytest

from chapter20.cost import trainable
from chapter20.cost.catalog import load_catalog
from chapter20.cost.selection import cheapest_config


def test_every_catalog_gpu_has_a_row_and_every_capability_its_source():
    cited = trainable.load_compute_capabilities()
    assert set(load_catalog()["gpu_model"]) <= set(cited.index)
    with_capability = cited[cited["compute_capability"] != ""]
    assert (with_capability["document"] != "").all() and (with_capability["read_via"] != "").all()
    assert (cited["date_read"] != "").all()


def test_the_rule_and_its_reasons():
    models = trainable.trainable_gpu_models()
    assert not models.loc["Radeon Pro V520", "trainable"]
    assert "ROCm" in models.loc["Radeon Pro V520", "reason"]
    assert models.loc["T4g", "reason"] == "compute capability not cited"
    for old in ("K80", "M60"):
        assert not models.loc[old, "trainable"]
        assert "no kernels" in models.loc[old, "reason"]
    ok = models[models["trainable"]]
    assert set(ok["compute_capability"]) <= set(trainable.TORCH_CUDA_ARCHS)
    assert (ok["reason"] == "").all() and (models.loc[~models["trainable"], "reason"] != "").all()
    assert {"T4", "A10G", "A100", "H100", "V100"} <= set(ok.index)


def test_a_gpu_the_data_file_does_not_list_is_not_trained_on():
    catalog = load_catalog()
    new = catalog.iloc[[0]].assign(gpu_model="B200")
    models = trainable.trainable_gpu_models(pd.concat([catalog, new]))
    assert models.loc["B200", "reason"] == "compute capability not cited"
    kept = trainable.trainable_catalog(pd.concat([catalog, new]))
    assert "B200" not in set(kept["gpu_model"])


def test_the_trainable_menu_keeps_the_catalogs_order_and_only_trainable_rows():
    catalog = load_catalog()
    kept = trainable.trainable_catalog(catalog)
    models = trainable.trainable_gpu_models(catalog)
    assert set(kept["gpu_model"]) == set(models.index[models["trainable"]])
    assert list(kept.index) == [i for i in catalog.index if i in set(kept.index)]


def test_c19_on_the_trainable_catalog_is_cheaper_than_the_chapters_pick():
    choice = cheapest_config(8, 50, catalog=trainable.trainable_catalog())
    l12 = cheapest_config(8, 50, gpu_model="A10G")
    assert choice.gpus >= 8 and choice.price_per_hour <= l12.price_per_hour
    assert choice.price_per_hour == pytest.approx(4.0)  # 8 x Lambda's RTX 6000, 2023-06-15


def test_every_source_file_names_the_commit_it_was_read_at():
    for path in trainable.TORCH_CUDA_ARCHS_COMMITS:
        assert path in trainable.TORCH_CUDA_ARCHS_SOURCE
    assert all(len(c) == 40 for c in trainable.TORCH_CUDA_ARCHS_COMMITS.values())
