"""§20.5 Training cost: the price catalog, configurations, time and cost to train, spot preemptions.

- ``catalog``: SkyPilot's public cloud catalog at one commit, its sources and a price history,
  validated as they are read (§20.5.1); ``catalog_build`` rebuilds them from a mirror of the
  catalog repository (``python -m chapter20.cost.catalog_build``; not re-exported);
- ``hardware``: datasheet peaks per GPU and precision, GPU links and instance networks, each
  with its cited source (§20.5);
- ``selection``: configurations of catalog instance types and the instance selector of listing
  L12, corrected (§20.5.1);
- ``trainable``: which of the catalog's GPUs PyTorch's CUDA build can train on (each compute
  capability cited), and why the others are left out (§20.5.1);
- ``estimates``: a workload and its throughput, the scaling efficiency, time and cost to train on
  demand and on spot, the cost breakdown (§20.5, §20.5.2);
- ``fleet_choices``: every fleet (instance type × count, on demand or spot) over the catalog,
  the Pareto frontier of time and cost, the cheapest fleet of a GPU model (§20.5);
- ``plots``: the figures of notebook 08;
- ``young_daly``: the Young/Daly preemption model: the checkpoint interval and the expected
  overhead of preemptions (§20.5.2);
- ``throughput``: one training step timed here.

Everything public is importable from ``chapter20.cost``, and imported only when used
(``chapter20.core.facade``); inside the package, import from the submodule.
"""

from chapter20.core.facade import lazy_exports

__all__, __getattr__ = lazy_exports(__name__, exclude=("catalog_build",))
