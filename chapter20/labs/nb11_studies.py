"""§20.6–§20.7 and §20.5 The heavy studies of notebook 11; their records are read by
``chapter20.capstone.evaluation``.

- **What training adds** (:func:`training_curves`): the capstone encoder trained from its LSA
  start and from a random start, 3 seeds, evaluated along the way on the test pairs, the
  validation pairs and Lee; ``start_share`` says how much of the final score the start
  already had. ``chapter20 bench curves``.
- **When to stop** (§20.5's early stopping, ``early_stopping``): a rule fixed before any
  curve was measured (:data:`EARLY_STOPPING`), applied to the validation curve of each run; the
  compute it saves and the test quality it gives up.
- **Quality against the batch** (C01 on what is here, :func:`batch_study`): from 32 documents to
  every training document in one step (gradient caching), at equal documents seen and at equal
  steps, 3 seeds; ``saturation_batch`` finds where gains stop. ``chapter20 bench batch``.
- **The recipe search** (:func:`recipe_search`): variants of the random-start recipe, chosen
  on the validation pairs' MRR, never on Lee or the test pairs. ``chapter20 bench recipe``.

Each bench prints as it goes and, with ``--out`` (or ``CHAPTER20_STUDY_OUT``), writes the record
that notebook 11 reads (``core.study_record.write_study``: date, machine, load, command).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np
import pandas as pd

from chapter20.capstone.evaluation import (
    early_stopping,
    heldout_sentence_pairs,
    past_start,
    saturation_batch,
    start_share,
)
from chapter20.capstone.recipe import (
    RECIPE_RUN,
    RECIPE_TRAINING,
    EncoderRecipe,
    build_encoder,
    train_encoder,
)
from chapter20.core.checks import check_int, check_real
from chapter20.core.plotting import new_panels
from chapter20.core.study_record import study_output, write_study

__all__ = [
    "BATCHES",
    "CURVES_FILE",
    "BATCH_FILE",
    "EARLY_STOPPING",
    "RECIPE_FILE",
    "RECIPE_SEARCH",
    "batch_benchmark",
    "batch_claim_evidence",
    "batch_study",
    "curves_benchmark",
    "plot_batch_study",
    "plot_training_curves",
    "recipe_benchmark",
    "recipe_search",
    "replay_batch_row",
    "training_curves",
]

#: The committed records (``data/``) of the three benches.
CURVES_FILE = "capstone_training_curves.csv"
BATCH_FILE = "capstone_batch_study.csv"
RECIPE_FILE = "capstone_recipe_study.csv"

#: The early-stopping rule, fixed before any curve was measured: evaluate every ``eval_every``
#: steps; stop once ``patience`` evaluations in a row have not raised the best validation MRR
#: by more than ``min_delta``; keep the weights of the best evaluation.
EARLY_STOPPING = {"monitor": "val_mrr", "patience": 3, "min_delta": 0.001}


def _pairs():
    return heldout_sentence_pairs(None), heldout_sentence_pairs(None, split="validation")


def _seeds(seeds: Sequence[int]) -> list[int]:
    if isinstance(seeds, (str, bytes)) or not isinstance(seeds, Sequence) or not seeds:
        raise TypeError(f"seeds must be a non-empty sequence of ints, got {seeds!r}")
    return [check_int("seeds", s, 0) for s in seeds]


# --- what training adds ---------------------------------------------------------------------


def training_curves(
    inits: Sequence[str] = ("lsa", "random"),
    seeds: Sequence[int] = (0, 1, 2),
    *,
    steps: int = 600,
    batch: int = 512,
    eval_every: int = 50,
    log: Callable[[dict], None] | None = None,
) -> pd.DataFrame:
    """The capstone recipe trained from each start of ``inits`` for each seed, ``steps`` steps
    of ``batch`` documents, evaluated every ``eval_every`` steps (§20.6): one row per
    evaluation with ``init``, ``seed`` and every figure of
    ``chapter20.capstone.recipe.train_encoder`` (test, validation, Lee)."""
    test, validation = _pairs()
    rows = []
    for init in inits:
        for seed in _seeds(seeds):
            setup = build_encoder(EncoderRecipe(init=init, seed=seed))
            run = replace(RECIPE_RUN, steps=steps, batch=batch)
            for record in train_encoder(
                setup, run, eval_every=eval_every, retrieval=test, validation=validation
            ):
                rows.append({"init": init, "seed": seed, **record})
                if log is not None:
                    log(rows[-1])
    return pd.DataFrame(rows)


def plot_training_curves(curves: pd.DataFrame, references: dict[str, dict[str, float]]):
    """Two panels against steps, mean ± std over seeds per start: Lee Pearson and held-out MRR,
    with each reference (a same-text baseline) as a grey line named in the legend."""
    fig, axes = new_panels(2, "What training adds: the encoder from each start", figsize=(12, 4))
    for ax, (column, label) in zip(
        axes, (("lee_pearson", "Lee Pearson r"), ("mrr", "held-out MRR"))
    ):
        for init, runs in curves.groupby("init", sort=False):
            stats = runs.groupby("step")[column].agg(["mean", "std"]).fillna(0.0)
            ax.plot(stats.index, stats["mean"], marker="o", ms=3, label=f"{init} start")
            ax.fill_between(
                stats.index, stats["mean"] - stats["std"], stats["mean"] + stats["std"], alpha=0.25
            )
        styles = ("--", ":", "-.", (0, (5, 1, 1, 1)))  # baselines of equal score stay apart
        for (name, values), style in zip(references.items(), styles * len(references)):
            if np.isfinite(values.get(column, np.nan)):
                ax.axhline(values[column], linestyle=style, linewidth=1, color="grey", label=name)
        ax.set_xlabel("optimizer steps")
        ax.set_ylabel(label)
        ax.legend(
            loc="upper center", bbox_to_anchor=(0.5, -0.16), frameon=False, ncol=3, fontsize=7
        )  # off the data
    return fig


# --- quality against the batch (C01) ---------------------------------------------------------

#: The batches of :func:`batch_study`, in documents; None: every training document at once.
BATCHES = (32, 128, 512, None)


def _run_at(setup, start, batch: int, steps: int, chunk: int, test, validation) -> dict:
    setup.model = type(setup.model)(**setup.model_kwargs)  # unwrapped: the Trainer rewires it
    setup.model.load_state_dict(start)
    training = replace(RECIPE_TRAINING, chunk_size=chunk if batch > chunk else None)
    run = replace(RECIPE_RUN, steps=steps, batch=batch, training=training)
    began = time.perf_counter()
    record = train_encoder(setup, run, retrieval=test, validation=validation,
                           evaluate_start=False)[-1]  # fmt: skip
    return {**record, "wall_seconds": time.perf_counter() - began}


def batch_study(
    batches: Sequence[int | None] = BATCHES,
    seeds: Sequence[int] = (0, 1, 2),
    *,
    epochs: float = 16.0,
    steps: int = 50,
    chunk: int = 256,
    init: str = "random",
    log: Callable[[dict], None] | None = None,
) -> pd.DataFrame:
    """Quality against the batch (C01 on this corpus): for each seed and batch (documents; None:
    all of them, one step per epoch through gradient caching in chunks of ``chunk``), the
    recipe from the ``init`` start trained (a) on ``epochs`` × the training documents
    (``mode="equal documents"``: a small batch takes many steps) and (b) for ``steps`` steps
    (``mode="equal steps"``: a large batch sees more), at the recipe's rate. One row per run
    with the final figures of ``train_encoder``."""
    epochs = check_real("epochs", epochs, minimum=0.0, exclusive=True, finite=True)
    steps, chunk = check_int("steps", steps, 1), check_int("chunk", chunk, 1)
    test, validation = _pairs()
    rows = []
    for seed in _seeds(seeds):
        setup = build_encoder(EncoderRecipe(init=init, seed=seed))
        start = {k: v.clone() for k, v in setup.model.state_dict().items()}
        every = len(setup.documents)
        for batch in batches:
            size = every if batch is None else min(check_int("batches", batch, 2), every)
            for mode, n in (
                ("equal documents", max(1, round(epochs * every / size))),
                ("equal steps", steps),
            ):
                record = _run_at(setup, start, size, n, chunk, test, validation)
                rows.append({"mode": mode, "batch": size, "seed": seed, "init": init, **record})
                if log is not None:
                    log(rows[-1])
    return pd.DataFrame(rows)


def batch_claim_evidence(frame: pd.DataFrame, start: pd.DataFrame, mode: str = "equal steps"):
    """``ClaimsLog.check("C01", ...)``'s keyword arguments from the batch study: where gains
    stop at ``mode`` (recall@1), and ``trained_past_start``: whether every batch's runs left the
    untrained start beyond the seed spread (:func:`past_start`); if not, no batch is measured
    and the note says which batches stayed at the start (§20.6; C01)."""
    table = past_start(frame, start, mode)
    trained = bool(table["past_start"].all())
    stayed = [f"{b:,}" for b in table.loc[~table["past_start"], "batch"]]
    note = (
        f"{mode}, {int(frame.loc[frame['mode'] == mode, 'step'].iloc[0])} steps: "
        + ("every batch beat the untrained start" if trained else
           f"recall@1 of batches {', '.join(stayed)} within twice the seed spread of the start's")
    )  # fmt: skip
    measured = float(saturation_batch(frame, mode)) if trained else None
    return {"measured": measured, "unit": "examples per batch", "trained_past_start": trained,
            "note": note}  # fmt: skip


def replay_batch_row(
    frame: pd.DataFrame, mode: str = "equal steps", batch: int = 32, seed: int = 0
):
    """One run of the batch study trained again now: the record's row of (``mode``, ``batch``,
    ``seed``) and this run's figures of the same configuration, for a check that the record is
    what this code computes (§20.6; C01)."""
    rows = frame[(frame["mode"] == mode) & (frame["batch"] == batch) & (frame["seed"] == seed)]
    if len(rows) != 1:
        raise ValueError(f"the record has no single row for {mode!r}, batch {batch}, seed {seed}")
    row = rows.iloc[0]
    setup = build_encoder(EncoderRecipe(init=str(row["init"]), seed=seed))
    start = {k: v.clone() for k, v in setup.model.state_dict().items()}
    chunk = int(str(row["command"]).split("--chunk")[-1].split()[0])
    test, validation = _pairs()
    return row, _run_at(setup, start, batch, int(row["step"]), chunk, test, validation)


def plot_batch_study(
    frame: pd.DataFrame,
    columns=(("recall@1", "held-out recall@1"), ("lee_pearson", "Lee Pearson r")),
    start: pd.DataFrame | None = None,
):
    """One panel per column: the mean ± std over seeds against the batch (log scale), one line
    per mode (equal documents seen, equal steps), and the untrained start's mean ± std
    (:func:`untrained_start`) as a grey band when ``start`` is given."""
    fig, axes = new_panels(
        len(columns),
        "Quality against the batch, 32 documents to the whole training text",
        figsize=(12, 4),
    )
    for ax, (column, label) in zip(axes, columns):
        if start is not None:
            mean, std = start[column].mean(), start[column].std()
            ax.axhspan(mean - std, mean + std, color="grey", alpha=0.2)
            ax.axhline(mean, color="grey", linestyle="--", label="untrained start")
        for mode, runs in frame.groupby("mode", sort=False):
            stats = runs.groupby("batch")[column].agg(["mean", "std"]).fillna(0.0)
            ax.errorbar(
                stats.index, stats["mean"], yerr=stats["std"], marker="o", capsize=4, label=mode
            )
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted(set(frame["batch"])), [f"{b:,}" for b in sorted(set(frame["batch"]))])
        ax.set_xlabel("batch (documents per step)")
        ax.set_ylabel(label)
    axes[-1].legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=8)
    return fig


# --- the recipe search ------------------------------------------------------------------------

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


# --- the benches ------------------------------------------------------------------------------


def _printer(*keys: str) -> Callable[[dict], None]:
    """A bench's ``log``: prints ``keys`` of each row as it comes (floats to 3 decimals)."""

    def log(row: dict) -> None:
        print("  ".join(f"{k} {row[k]:.3f}" if isinstance(row[k], float) else f"{k} {row[k]}"
                        for k in keys), flush=True)  # fmt: skip

    return log


def curves_benchmark(steps: int = 600, batch: int = 512, eval_every: int = 50, out: str = ""):
    """``chapter20 bench curves``: :func:`training_curves` (both starts, 3 seeds) and the early
    stopping of each run, printed; with ``out`` written as ``data/capstone_training_curves.csv``
    reads."""
    log = _printer("init", "seed", "step", "loss", "lee_pearson", "mrr", "val_mrr")
    curves = training_curves(steps=steps, batch=batch, eval_every=eval_every, log=log)
    if study_output(out):
        command = (
            f"chapter20 bench curves --steps {steps} --batch {batch} --eval-every {eval_every}"
        )
        print("written:", write_study(curves, study_output(out), command))
    print(start_share(curves).round(3).to_string(index=False))
    print(early_stopping(curves, **EARLY_STOPPING).round(3).to_string(index=False))


def batch_benchmark(epochs: float = 16.0, steps: int = 50, chunk: int = 256, out: str = ""):
    """``chapter20 bench batch``: :func:`batch_study` (3 seeds) and where gains stop, printed;
    with ``out`` written as ``data/capstone_batch_study.csv`` reads."""
    log = _printer("mode", "batch", "seed", "step", "recall@1", "mrr", "lee_pearson",
                   "wall_seconds")  # fmt: skip
    frame = batch_study(epochs=epochs, steps=steps, chunk=chunk, log=log)
    for mode in dict.fromkeys(frame["mode"]):
        print(f"{mode}: gains stop at a batch of {saturation_batch(frame, mode):,} documents")
    if study_output(out):
        command = f"chapter20 bench batch --epochs {epochs:g} --steps {steps} --chunk {chunk}"
        print("written:", write_study(frame, study_output(out), command))


def recipe_benchmark(steps: int = 300, batch: int = 512, out: str = ""):
    """``chapter20 bench recipe``: :func:`recipe_search`, printed; with ``out`` written as
    ``data/capstone_recipe_study.csv`` reads."""
    log = _printer("variant", "val_mrr", "mrr", "recall@1", "lee_pearson", "seconds")
    frame = recipe_search(steps=steps, batch=batch, log=log)
    if study_output(out):
        command = f"chapter20 bench recipe --steps {steps} --batch {batch}"
        print("written:", write_study(frame, study_output(out), command))
