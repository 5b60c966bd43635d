"""Notebook 11's printed attributions (§20.6): the composed step's time by technique, and where
each baseline's chosen setting lies in its grid."""

import pandas as pd

from chapter20.labs import nb11_ablation as ablation_lab
from chapter20.labs import nb11_baselines as baselines_lab


def test_cost_breakdown_subtracts_each_variant_from_the_composed_step():
    medians = {name: 10.0 for name in ablation_lab.ABLATION}
    medians.update({"composed": 100.0, "32-bit optimizer state (no 8-bit)": 40.0})
    medians["plain fp32 (every technique off)"] = 15.0
    costs = pd.DataFrame({"variant": list(medians), "step_ms": list(medians.values())})
    lines = ablation_lab.cost_breakdown(costs)
    assert lines[0].startswith("composed step: 100.0 ms")
    assert "  32-bit optimizer state (no 8-bit): 40.0 ms; so it adds +60.0 ms" in lines
    assert "  plain fp32 (every technique off): 15.0 ms; all of them together add +85.0 ms" in lines
    assert not any(ablation_lab.CONTROL in line for line in lines)
    noisy = costs.assign(step_ms_min=costs.step_ms - 1.0, step_ms_max=costs.step_ms + 2.5)
    assert ablation_lab.cost_breakdown(noisy)[-1].startswith(
        "the repeats of one variant spread up to 3.5 ms"
    )


def test_choice_lines_say_whether_a_chosen_setting_is_at_the_grid_edge():
    edge = pd.DataFrame({"topics": [50, 100, 200], "chosen": [False, False, True]})
    inside = pd.DataFrame({"topics": [50, 100, 200], "chosen": [False, True, False]})
    grid = pd.DataFrame({"k1": [0.3, 0.6, 0.6], "b": [0.5, 0.5, 0.75], "chosen": [0, 1, 0]})
    schemes = pd.DataFrame({"scheme": ["nfc", "lfc"], "chosen": [False, True]})
    lines = baselines_lab.choice_lines({("lsi", "a"): edge, ("lsi", "b"): inside,
                                        ("bm25", "c"): grid.astype({"chosen": bool}),
                                        ("tfidf", "d"): schemes})  # fmt: skip
    assert lines[0] == "lsi on a: topics 200 chosen, at the grid's edge in topics"
    assert lines[1] == "lsi on b: topics 100 chosen, inside the grid"
    assert lines[2] == "bm25 on c: k1 0.6, b 0.5 chosen, at the grid's edge in k1, b"
    assert lines[3] == "tfidf on d: scheme lfc chosen, inside the grid"
