"""§20.5 The hardware figures of the time model (chapter20.cost.hardware): datasheet peaks per
precision with a cited source, a precision a GPU lacks refused by name, links and networks."""

from __future__ import annotations

import pytest

from chapter20.cost.estimates import throughput_per_gpu
from chapter20.cost.hardware import (
    PRECISIONS,
    gpu_link_gb_s,
    instance_network_gbps,
    load_gpu_datasheets,
    load_instance_network,
    peak_tflops,
    precisions_of,
    timed_gpus,
)


def test_every_figure_has_a_document_and_an_address():
    for frame in (load_gpu_datasheets(), load_instance_network()):
        assert frame["document"].str.len().gt(10).all()
        assert frame["read_via"].str.startswith("https://").all()


def test_the_v100_has_no_bf16_and_is_refused_for_a_bf16_workload():
    assert precisions_of("V100") == ["fp16", "fp32"]
    assert peak_tflops("V100", "fp16") == 125
    with pytest.raises(ValueError, match=r"the V100 has no bf16 peak .*\(it has fp16, fp32\)"):
        peak_tflops("V100", "bf16")
    with pytest.raises(ValueError, match=r"the V100 has no bf16 peak"):
        throughput_per_gpu("V100")  # the workload is bf16


def test_peaks_are_per_precision_and_unknown_gpus_are_named():
    assert precisions_of("A100") == list(PRECISIONS)
    assert peak_tflops("A100", "bf16") == peak_tflops("A100", "fp16") == 312
    assert peak_tflops("A100", "tf32") < peak_tflops("A100", "bf16")
    assert peak_tflops("A100", "fp32") < peak_tflops("A100", "tf32")
    assert peak_tflops("H200", "bf16") == peak_tflops("H100", "bf16")  # same compute
    assert "A10G" not in timed_gpus()  # no NVIDIA datasheet for AWS's part
    with pytest.raises(ValueError, match=r"gpu_model must be one of \[.*'A100'.*got 'A10G'"):
        peak_tflops("A10G", "bf16")
    with pytest.raises(ValueError, match="precision must be one of"):
        peak_tflops("A100", "int8")


def test_the_throughput_model_orders_gpus_by_their_peak_in_the_workloads_precision():
    speeds = [throughput_per_gpu(g) for g in ("A100", "H100")]
    assert speeds == sorted(speeds)
    assert throughput_per_gpu("H200") == pytest.approx(throughput_per_gpu("H100"))


def test_links_and_networks():
    assert gpu_link_gb_s("A100") == 300  # 600 GB/s both ways, per direction
    assert gpu_link_gb_s("H100") == 450
    assert gpu_link_gb_s("V100") is None  # no cited figure
    assert instance_network_gbps("aws", "p4d.24xlarge") == 400
    assert instance_network_gbps("aws", "p5.48xlarge") == 3200
    assert instance_network_gbps("lambda", "gpu_8x_a100") is None


def test_a_figure_without_a_source_or_a_positive_value_is_refused(tmp_path):
    from chapter20.core.paths import data_file

    lines = data_file("gpu_datasheets.csv").read_text(encoding="utf-8").splitlines()
    unsourced = tmp_path / "unsourced.csv"
    unsourced.write_text("\n".join([lines[0], lines[1].replace("https://", "memory://")]) + "\n")
    with pytest.raises(ValueError, match="line 2: every figure needs its document and URL"):
        load_gpu_datasheets(unsourced)
    negative = tmp_path / "negative.csv"
    negative.write_text("\n".join([lines[0], lines[1].replace(",312,", ",-312,")]) + "\n")
    with pytest.raises(ValueError, match="line 2: the value must be a number > 0"):
        load_gpu_datasheets(negative)
