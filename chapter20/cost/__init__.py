"""§20.5 Training cost: the price catalog, configurations, time and cost to train, spot preemptions.

- ``catalog``: SkyPilot's public cloud catalog at one commit, its sources and a price history,
  validated as they are read (§20.5.1); ``catalog_build`` rebuilds them from a mirror of the
  catalog repository (``python -m chapter20.cost.catalog_build``; not re-exported);
- ``hardware``: datasheet peaks per GPU and precision, GPU links and instance networks, each
  with its cited source (§20.5);
- ``selection``: configurations of catalog instance types and the instance selector of listing
  L12, corrected (§20.5.1);
- ``estimates``: a workload and its throughput, the scaling efficiency, time and cost to train on
  demand and on spot, the cost breakdown (§20.5, §20.5.2);
- ``fleet_choices``: every fleet (instance type × count, on demand or spot) over the catalog,
  the Pareto frontier of time and cost, the cheapest fleet of a GPU model (§20.5);
- ``plots``: the figures of notebook 08;
- ``young_daly``: the Young/Daly preemption model: the checkpoint interval and the expected
  overhead of preemptions (§20.5.2);
- ``throughput``: one training step timed here (it imports the trainer: not re-exported).

Everything public but ``throughput`` is importable from ``chapter20.cost``; inside the package,
import from the submodule.
"""

from chapter20.cost.catalog import (
    CATALOG_COLUMNS,
    DEFAULT_REGIONS,
    PRICE_COLUMNS,
    catalog_or_default,
    gpu_models,
    load_catalog,
    load_price_history,
    load_snapshot,
    load_sources,
    price_table,
    snapshot_label,
    spot_discounts,
)
from chapter20.cost.estimates import (
    EGRESS_PER_GB,
    EMBEDDING_WORKLOAD,
    H200_MEASUREMENT,
    STORAGE_PER_GB_MONTH,
    THROUGHPUT_CODE,
    CostBreakdown,
    DataFootprint,
    Preemption,
    ThroughputRecord,
    TrainingCost,
    Workload,
    cost_breakdown,
    cost_to_train,
    data_parallel_efficiency,
    mixed_precision_saving,
    overhead_vs_interval,
    spot_savings,
    throughput_per_gpu,
    time_to_train,
)
from chapter20.cost.fleet_choices import (
    cheapest_fleet,
    pareto_frontier,
    training_options,
    untimed_types,
)
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
from chapter20.cost.plots import (
    plot_pareto,
    plot_price_history,
    plot_spot_discounts,
    plot_spot_overhead,
    plot_time_and_cost,
)
from chapter20.cost.selection import (
    SPOT_QUOTES,
    Config,
    cheapest_config,
    configuration,
)
from chapter20.cost.young_daly import (
    PreemptionModel,
    expected_wall_time,
    preemption_overhead,
    simulate_wall_time,
    young_daly_interval,
)

__all__ = [
    "CATALOG_COLUMNS",
    "Config",
    "CostBreakdown",
    "DEFAULT_REGIONS",
    "DataFootprint",
    "EGRESS_PER_GB",
    "EMBEDDING_WORKLOAD",
    "H200_MEASUREMENT",
    "PRECISIONS",
    "PRICE_COLUMNS",
    "Preemption",
    "PreemptionModel",
    "SPOT_QUOTES",
    "STORAGE_PER_GB_MONTH",
    "THROUGHPUT_CODE",
    "ThroughputRecord",
    "TrainingCost",
    "Workload",
    "catalog_or_default",
    "cheapest_config",
    "cheapest_fleet",
    "configuration",
    "cost_breakdown",
    "cost_to_train",
    "data_parallel_efficiency",
    "expected_wall_time",
    "gpu_link_gb_s",
    "gpu_models",
    "instance_network_gbps",
    "load_catalog",
    "load_gpu_datasheets",
    "load_instance_network",
    "load_price_history",
    "load_snapshot",
    "load_sources",
    "mixed_precision_saving",
    "overhead_vs_interval",
    "pareto_frontier",
    "peak_tflops",
    "plot_pareto",
    "plot_price_history",
    "plot_spot_discounts",
    "plot_spot_overhead",
    "plot_time_and_cost",
    "precisions_of",
    "preemption_overhead",
    "price_table",
    "simulate_wall_time",
    "snapshot_label",
    "spot_discounts",
    "spot_savings",
    "throughput_per_gpu",
    "time_to_train",
    "timed_gpus",
    "training_options",
    "untimed_types",
    "young_daly_interval",
]
