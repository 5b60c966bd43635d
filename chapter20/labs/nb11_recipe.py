"""§20.6 Notebook 11's recipe search: variants of the capstone recipe from a random start,
each trained once and chosen on the validation pairs' MRR (never on Lee or the test pairs).

``chapter20 bench recipe`` prints it and, with ``--out`` (or ``CHAPTER20_STUDY_OUT``), writes
the record that notebook 11 reads (``core.study_record.write_study``: date, machine, load,
command). The scaling studies are ``chapter20.labs.nb11_scaling``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

import pandas as pd

from chapter20.capstone.evaluation import heldout_sentence_pairs
from chapter20.capstone.recipe import (
    RECIPE_RUN,
    RECIPE_TRAINING,
    EncoderRecipe,
    build_encoder,
    train_encoder,
)
from chapter20.core.study_record import study_output, write_study

__all__ = ["RECIPE_FILE", "RECIPE_SEARCH", "recipe_benchmark", "recipe_search"]

#: The committed record of the recipe search (``data/``).
RECIPE_FILE = "capstone_recipe_study.csv"


def _pairs():
    return heldout_sentence_pairs(None), heldout_sentence_pairs(None, split="validation")


#: Variants of the recipe from a random start, and the LSA start as the reference: name →
#: (recipe fields, fields of the recipe's composed step). The first is the recipe's own settings.
RECIPE_SEARCH: dict[str, tuple[dict, dict]] = {
    "random start: lr 1e-3, temperature 0.2 (the recipe)": ({"init": "random"}, {}),
    "random start: lr 3e-3": ({"init": "random"}, {"lr": 3e-3}),
    "random start: lr 3e-3, temperature 0.1": (
        {"init": "random"},
        {"lr": 3e-3, "temperature": 0.1},
    ),
    "random start: 512 wide": ({"init": "random", "dim": 512}, {}),
    "random start: spans of 8-32 words": ({"init": "random", "min_span": 8, "max_span": 32}, {}),
    "random start: words seen once kept (min_count 1)": ({"init": "random", "min_count": 1}, {}),
    "LSA start (the reference)": ({"init": "lsa"}, {}),
}


def recipe_search(
    names: Sequence[str] | None = None,
    *,
    steps: int = 300,
    batch: int = 512,
    seed: int = 0,
    log: Callable[[dict], None] | None = None,
) -> pd.DataFrame:
    """Each variant of :data:`RECIPE_SEARCH` trained ``steps`` steps of ``batch`` documents and
    evaluated at the end on the validation pairs (the choice), the test pairs and Lee (shown,
    not used to choose): one row per variant, ``chosen`` on the random start's variant of the
    highest validation MRR (the LSA start is the reference)."""
    test, validation = _pairs()
    rows = []
    for name in names or list(RECIPE_SEARCH):
        if name not in RECIPE_SEARCH:
            raise ValueError(f"unknown variant {name!r}; one of {list(RECIPE_SEARCH)}")
        fields, step_fields = RECIPE_SEARCH[name]
        setup = build_encoder(EncoderRecipe(**{**fields, "seed": seed}))
        training = replace(RECIPE_TRAINING, **step_fields)
        run = replace(RECIPE_RUN, steps=steps, batch=batch, training=training)
        records = train_encoder(setup, run, retrieval=test, validation=validation)
        rows.append(
            {
                "variant": name,
                "init": fields.get("init", "lsa"),
                "seed": seed,
                "steps": steps,
                "batch": batch,
                "start_val_mrr": records[0]["val_mrr"],
                **records[-1],
            }
        )
        if log is not None:
            log(rows[-1])
    frame = pd.DataFrame(rows)
    random = frame["init"] == "random"
    frame["chosen"] = random & (frame["val_mrr"] == frame.loc[random, "val_mrr"].max())
    return frame


def _printer(*keys: str) -> Callable[[dict], None]:
    """A bench's ``log``: prints ``keys`` of each row as it comes (floats to 3 decimals)."""

    def log(row: dict) -> None:
        print("  ".join(f"{k} {row[k]:.3f}" if isinstance(row[k], float) else f"{k} {row[k]}"
                        for k in keys), flush=True)  # fmt: skip

    return log


def recipe_benchmark(steps: int = 300, batch: int = 512, out: str = ""):
    """``chapter20 bench recipe``: :func:`recipe_search`, printed; with ``out`` written as
    ``data/capstone_recipe_study.csv`` reads."""
    log = _printer("variant", "val_mrr", "mrr", "recall@1", "lee_pearson", "seconds")
    frame = recipe_search(steps=steps, batch=batch, log=log)
    if study_output(out):
        command = f"chapter20 bench recipe --steps {steps} --batch {batch}"
        print("written:", write_study(frame, study_output(out), command))
