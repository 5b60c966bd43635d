"""The sparse-input experiment of notebook 10, run and measured (the note on efficient embedding
training, topic 3; claim C28), and ``bench vocab``.

The note's PCA example, whose data and classifier are ``chapter20.vocab.bag_of_words``:
Wikipedia sentences as sparse bag-of-words rows over a 10,000-word vocabulary, fed to a learned
layer directly (``nn.Linear`` on the densified rows, or ``nn.EmbeddingBag`` on the sparse ones)
or through a fixed PCA projection to 300 dimensions (the variants of
``chapter20.vocab.sparse_input``): :func:`projection_equivalence` (the proofs),
:func:`sparse_projection_benchmark` (bytes and step time), the autoencoder against PCA
(:func:`autoencoder_study`, its record ``data/autoencoder_vs_pca.csv`` and
:func:`pca_row_check`) and ``benchmark()``.

The figures are ``chapter20.labs.nb10_records``'; the word-vector experiments of the same
notebook, ``chapter20.labs.nb10_word_vectors``; the package side, ``chapter20.vocab``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from chapter20.core.checks import check_int
from chapter20.core.device import get_device
from chapter20.core.measure import (
    Timing,
    format_bytes,
    gradients_of,
    tensor_bytes,
    time_interleaved,
)
from chapter20.core.study_record import study_output, write_study
from chapter20.techniques.optimizers import sparse_optimizers
from chapter20.vocab.autoencoder import AutoencoderResult, train_autoencoder
from chapter20.vocab.bag_of_words import (
    LAYER_WIDTH,
    STEP_BATCH,
    BagOfWordsData,
    CompressedInput,
    adam_optimizer,
    bag_of_words_data,
    check_variants,
    classifier_step,
    compress_bag_of_words,
    projection_accuracy,
    projection_model,
)
from chapter20.vocab.sparse_input import VARIANTS, BagOfWordsBatches, ProjectionModel

__all__ = [
    "AUTOENCODER_EPOCHS",
    "AUTOENCODER_FILE",
    "AUTOENCODER_SEEDS",
    "VALIDATION_FRACTION",
    "autoencoder_benchmark",
    "autoencoder_epoch_grid",
    "autoencoder_study",
    "autoencoder_vs_pca",
    "pca_row_check",
    "pca_step_speedup_evidence",
    "benchmark",
    "projection_equivalence",
    "sparse_projection_benchmark",
]

_INPUTS = {
    "dense_linear": "dense {V:,}-dim rows",
    "embedding_bag": "sparse {V:,}-dim rows (ids + counts)",
    "embedding_bag_sparse": "sparse {V:,}-dim rows, sparse gradients",
    "pca_online": "sparse {V:,}-dim rows, projected to {k} in the step",
    "pca_precomputed": "{k}-dim rows projected beforehand",
}


def _optimizer(model: ProjectionModel, lr: float) -> torch.optim.Optimizer:
    """Adam for every parameter; for a sparse-gradient EmbeddingBag, SparseAdam for its table
    and AdamW without weight decay (Adam's update) for the rest
    (``chapter20.techniques.optimizers.sparse_optimizers``)."""
    if model.kind == "embedding_bag_sparse":
        return sparse_optimizers(model, lr)
    return adam_optimizer(model, lr)


# --------------------------------------------------------------------------------------------
# Proofs, bytes and time, PCA against an autoencoder
# --------------------------------------------------------------------------------------------


def projection_equivalence(
    data: BagOfWordsData,
    compressed: CompressedInput,
    *,
    rows: int = 64,
    out_dim: int = 16,
    seed: int = 0,
) -> pd.DataFrame:
    """What must be equal in the C28 experiment, checked on ``rows`` training rows (CPU):

    - ``nn.EmbeddingBag`` (sum, counts as weights) on the sparse rows == ``nn.Linear`` on the
      densified rows, forward and weight gradient, with the same weights;
    - the PCA projection applied inside the step == applied beforehand (``pca_online`` ==
      ``pca_precomputed``);
    - ``pca.transform`` of the sparse rows == of the dense rows.

    Returns ``check, max_abs_diff, tolerance`` (float32 rounding: sums of up to ``rows``
    non-zeros in different orders), for ``measure.format_difference``.
    """
    rows = check_int("rows", rows, 1)
    cpu = torch.device("cpu")
    pca = compressed.pca.to(cpu)
    batches = BagOfWordsBatches(data.train, compressed.train_z.to(cpu), cpu)
    sel = np.arange(min(rows, data.train.shape[0]))
    bag = projection_model("embedding_bag", data, None, out_dim, seed, cpu)
    linear = projection_model("dense_linear", data, None, out_dim, seed, cpu)
    with torch.no_grad():
        linear.layer.weight.copy_(bag.layer.weight.T)
        linear.head.load_state_dict(bag.head.state_dict())
    labels = data.train_labels[sel]
    out_bag = bag(*batches.make("embedding_bag", sel))
    out_lin = linear(*batches.make("dense_linear", sel))
    F.cross_entropy(out_bag, labels).backward()
    F.cross_entropy(out_lin, labels).backward()
    online = ProjectionModel("pca_online", data.input_dim, out_dim, data.n_classes, pca)
    pre = ProjectionModel("pca_precomputed", data.input_dim, out_dim, data.n_classes, pca)
    pre.layer.load_state_dict(online.layer.state_dict())
    pre.head.load_state_dict(online.head.state_dict())
    with torch.no_grad():
        out_online = online(*batches.make("pca_online", sel))
        out_pre = pre(*batches.make("pca_precomputed", sel))
    sparse_rows = batches.make("pca_online", sel)[0]
    z_sparse = pca.transform(sparse_rows)
    z_dense = pca.transform(sparse_rows.to_dense())

    def diff(a: torch.Tensor, b: torch.Tensor) -> float:
        return float((a.detach() - b.detach()).abs().max())

    records = [
        ("EmbeddingBag(sparse) == Linear(dense): output", diff(out_bag, out_lin), 1e-5),
        (
            "EmbeddingBag(sparse) == Linear(dense): weight gradient",
            diff(bag.layer.weight.grad, linear.layer.weight.grad.T),
            1e-6,
        ),
        ("PCA in the step == PCA beforehand: output", diff(out_online, out_pre), 1e-4),
        ("pca.transform(sparse) == pca.transform(dense)", diff(z_sparse, z_dense), 1e-4),
    ]
    return pd.DataFrame(records, columns=["check", "max_abs_diff", "tolerance"])


def sparse_projection_benchmark(
    data: BagOfWordsData,
    compressed: CompressedInput | None = None,
    *,
    variants: Sequence[str] = VARIANTS,
    out_dim: int = LAYER_WIDTH,
    batch_size: int = STEP_BATCH,
    lr: float = 1e-3,
    warmup: int = 3,
    repeat: int = 15,
    seed: int = 0,
    device: torch.device | str | None = None,
) -> pd.DataFrame:
    """Bytes and step time of each way to feed the sparse input to a learned layer (C28).

    One training step = forward, cross-entropy on the article label, backward, Adam step, on
    a batch of ``batch_size`` random training rows (a fresh batch each call, same batches for
    every variant); the variants are timed interleaved (``measure.time_interleaved``).
    Columns: ``variant``, ``input``; ``layer_params`` and ``layer_bytes`` (the learned
    embedding layer); ``fixed_bytes`` (the projection held as buffers); ``gradient_bytes`` and
    ``optimizer_bytes`` (measured after a step, whole model); ``state_bytes`` (parameters,
    fixed projection, gradients and optimizer state of the whole model: what a training step
    holds besides activations); ``dataset_bytes`` (the training inputs as stored: sparse, or
    dense k-dim rows once projected beforehand); ``step_ms`` (median) and
    ``time_vs_embedding_bag``, with ``step_ms_min`` and ``step_ms_max`` (the repeats' fastest
    and slowest, the project's one spread: ``chapter20.core.seed_statistics``);
    ``fit_s`` (the PCA fit, a one-off cost; NaN without PCA).
    The fixed projection of ``pca_precomputed`` counts too: it is needed to embed new rows.
    """
    variants = check_variants(variants, compressed)
    batch_size = check_int("batch_size", batch_size, 1)
    dev = torch.device(device) if device is not None else get_device()
    z = compressed.train_z if compressed is not None else None
    batches = BagOfWordsBatches(data.train, z, dev)
    rng = np.random.default_rng(check_int("seed", seed, 0))
    n_batches = 4  # distinct batches, cycled: enough to defeat caching of one batch
    selections = [rng.choice(batches.n, size=batch_size, replace=False) for _ in range(n_batches)]
    labels = [data.train_labels[torch.from_numpy(s)].to(dev) for s in selections]
    steps, models, optimizers = {}, {}, {}
    for kind in variants:
        model = projection_model(kind, data, compressed, out_dim, seed, dev)
        optimizer = _optimizer(model, lr)
        inputs = [batches.make(kind, s) for s in selections]
        counter = iter(range(10**9))

        def step(model=model, optimizer=optimizer, inputs=inputs, counter=counter):
            i = next(counter) % n_batches
            classifier_step(model, optimizer, inputs[i], labels[i])

        step()
        models[kind], optimizers[kind], steps[kind] = model, optimizer, step
    sizes = {
        kind: (tensor_bytes(gradients_of(models[kind])), tensor_bytes(optimizers[kind]))
        for kind in variants
    }
    timings = time_interleaved(steps, warmup=warmup, repeat=repeat, device=dev)
    records = [
        _benchmark_record(kind, models[kind], data, compressed, sizes[kind], timings[kind])
        for kind in variants
    ]
    frame = pd.DataFrame(records)
    if "embedding_bag" in variants:
        base = frame.loc[frame["variant"] == "embedding_bag", "step_ms"].iloc[0]
        frame["time_vs_embedding_bag"] = frame["step_ms"] / base
    return frame


def _benchmark_record(
    kind: str,
    model: ProjectionModel,
    data: BagOfWordsData,
    compressed: CompressedInput | None,
    sizes: tuple[int, int],
    timing: Timing,
) -> dict[str, Any]:
    """One row of :func:`sparse_projection_benchmark`: the bytes of variant ``kind`` (``sizes``:
    its gradient and optimizer bytes, measured after a step) and its step time (median, and
    the repeats' fastest and slowest)."""
    k = compressed.pca.k if compressed is not None else 0
    if kind == "pca_online":
        fixed = tensor_bytes(list(model.buffers()))
    elif kind == "pca_precomputed":
        # The model holds no projection, but it must be kept to embed any new row.
        fixed = compressed.pca.projection_bytes
    else:
        fixed = 0
    gradient_bytes, optimizer_bytes = sizes
    params = tensor_bytes(list(model.parameters()))
    return {
        "variant": kind,
        "input": _INPUTS[kind].format(V=data.input_dim, k=k),
        "layer_params": sum(p.numel() for p in model.layer.parameters()),
        "layer_bytes": tensor_bytes(model.layer),
        "fixed_bytes": fixed,
        "gradient_bytes": gradient_bytes,
        "optimizer_bytes": optimizer_bytes,
        "state_bytes": params + fixed + gradient_bytes + optimizer_bytes,
        "dataset_bytes": tensor_bytes(
            compressed.train_z if kind == "pca_precomputed" else data.train
        ),
        "step_ms": timing.median * 1e3,
        "step_ms_min": timing.min * 1e3,
        "step_ms_max": timing.max * 1e3,
        "fit_s": compressed.fit_seconds if kind.startswith("pca") else float("nan"),
    }


def autoencoder_vs_pca(
    data: BagOfWordsData,
    compressed: CompressedInput,
    *,
    epochs: int = 1,
    seed: int = 0,
    device: torch.device | str | None = None,
) -> pd.DataFrame:
    """PCA against a small autoencoder at the same size (note, topic 3): the autoencoder of
    ``chapter20.vocab.autoencoder`` trained for ``epochs`` on the training rows to
    ``compressed.pca.k`` dimensions (seeded by ``seed``; its batch and rate are
    ``train_autoencoder``'s), beside the fitted PCA. One row each: ``k``, the bytes
    needed to encode a new row (``encoder_bytes``), the relative reconstruction error of the
    held-out rows (``heldout_error``: 0 = nothing lost, 1 = no better than the mean),
    ``fit_s`` (the randomized SVD, or the training epochs) and the held-out accuracy of the
    same article classifier as :func:`projection_accuracy` (1 epoch, the same seed and batches)
    reading each code as a ``pca_precomputed`` row."""
    ae = train_autoencoder(data.train, compressed.pca.k, epochs=epochs, seed=seed)
    codes = CompressedInput(compressed.pca, ae.fit_seconds, ae.transform(data.train),
                            ae.transform(data.test))  # fmt: skip
    records = []
    for name, source, encoder_bytes, error in (
        ("PCA", compressed, compressed.pca.projection_bytes,
         compressed.pca.reconstruction_error(data.test)),
        (f"autoencoder, {epochs} epoch{'s' * (epochs > 1)}", codes, ae.encoder_bytes,
         ae.reconstruction_error(data.test)),
    ):  # fmt: skip
        accuracy = projection_accuracy(data, source, variants=("pca_precomputed",), epochs=1,
                                       seed=seed, device=device)  # fmt: skip
        records.append({
            "method": name, "k": compressed.pca.k, "encoder_bytes": encoder_bytes,
            "heldout_error": error, "fit_s": source.fit_seconds,
            "test_accuracy": float(accuracy.test_accuracy.iloc[0]),
            "chance_accuracy": float(accuracy.chance_accuracy.iloc[0]),
        })  # fmt: skip
    return pd.DataFrame(records).set_index("method")


def pca_step_speedup_evidence(
    bench: pd.DataFrame, compressed: CompressedInput, batch_size: int, device
) -> dict:
    """The keyword arguments of ``ClaimsLog.check("C28", ...)`` from
    :func:`sparse_projection_benchmark`'s table (criterion in ``data/claims.csv``): the step
    time of the fastest raw-input variant over ``pca_precomputed``'s, with the condition that
    what is stored is smaller: the learned layer with the fixed projection it needs, against
    the raw variant's layer; the note adds the training state, the learned layer alone, and
    how many steps pay back the PCA fit."""
    raw = bench[bench["variant"].isin(["dense_linear", "embedding_bag", "embedding_bag_sparse"])]
    base = raw.loc[raw["step_ms"].idxmin()]
    pca = bench.set_index("variant").loc["pca_precomputed"]
    speedup = base["step_ms"] / pca["step_ms"]
    saved = (base["step_ms"] - pca["step_ms"]) / 1e3
    payback = f"{compressed.fit_seconds / saved:,.0f} steps" if saved > 0 else "never"
    stored = pca["layer_bytes"] + pca["fixed_bytes"]

    def change(before: float, after: float) -> str:
        word = "smaller" if after < before else "not smaller"
        return f"{format_bytes(before)} -> {format_bytes(after)}, {word}"

    note = (
        f"pca_precomputed vs {base['variant']}, the fastest raw variant, batch {batch_size} on "
        f"{device}: training state {change(base['state_bytes'], pca['state_bytes'])}; learned "
        f"layer {change(base['layer_bytes'], pca['layer_bytes'])}; weights with the fixed "
        f"projection {change(base['layer_bytes'], stored)}; the PCA fit is paid back after "
        f"{payback}"
    )
    smaller = bool(stored < base["layer_bytes"])
    return {"measured": float(speedup), "unit": "× faster step", "note": note,
            "conditions": {"stored weights smaller": smaller}}  # fmt: skip


# --------------------------------------------------------------------------------------------
# The committed record of the autoencoder against PCA
# --------------------------------------------------------------------------------------------


#: The committed record of :func:`autoencoder_benchmark` (``data/``).
AUTOENCODER_FILE = "autoencoder_vs_pca.csv"
#: The seeds of the autoencoder record.
AUTOENCODER_SEEDS = (0, 1, 2)


#: The autoencoder's epoch counts tried on the validation rows (one run of the largest).
AUTOENCODER_EPOCHS = (1, 3, 10, 30)
#: The share of the training rows held back to choose the autoencoder's epochs.
VALIDATION_FRACTION = 0.1


def _validation_split(data: BagOfWordsData, fraction: float) -> BagOfWordsData:
    """``data``'s training rows split at random (seed 0, the same split for every seed):
    ``1 - fraction`` of them as ``train``, the rest as ``test`` (the validation rows). The
    held-out ``data.test`` is not read."""
    n = data.train.shape[0]
    order = torch.randperm(n, generator=torch.Generator().manual_seed(0))
    n_val = round(fraction * n)
    if not 1 <= n_val < n:
        raise ValueError(f"fraction={fraction} leaves no training or no validation row")
    val, fit = order[:n_val].sort().values, order[n_val:].sort().values
    rows = data.train.coalesce()
    return BagOfWordsData(
        data.vocab, rows.index_select(0, fit).coalesce(), rows.index_select(0, val).coalesce(),
        data.train_labels[fit], data.train_labels[val], data.n_classes,
    )  # fmt: skip


def _code_scores(data: BagOfWordsData, compressed: CompressedInput, ae: AutoencoderResult,
                 seed: int, device) -> dict[str, float]:  # fmt: skip
    """``ae`` scored on ``data.test``: its relative reconstruction error, and the accuracy of
    :func:`projection_accuracy`'s classifier (1 epoch, ``seed``) trained on the codes of
    ``data.train``, reading each code as a ``pca_precomputed`` row."""
    codes = CompressedInput(compressed.pca, ae.fit_seconds, ae.transform(data.train),
                            ae.transform(data.test))  # fmt: skip
    accuracy = projection_accuracy(data, codes, variants=("pca_precomputed",), epochs=1,
                                   seed=seed, device=device)  # fmt: skip
    return {"error": ae.reconstruction_error(data.test),
            "accuracy": float(accuracy.test_accuracy.iloc[0]),
            "chance": float(accuracy.chance_accuracy.iloc[0])}  # fmt: skip


def autoencoder_epoch_grid(
    data: BagOfWordsData,
    compressed: CompressedInput,
    epochs: Sequence[int] = AUTOENCODER_EPOCHS,
    *,
    seed: int = 0,
    fraction: float = VALIDATION_FRACTION,
    device: torch.device | str | None = None,
) -> tuple[pd.DataFrame, dict[int, AutoencoderResult]]:
    """The autoencoder's epochs scored on validation rows, never on ``data.test``: one run of
    ``max(epochs)`` epochs (seeded by ``seed``) on the training rows less a share ``fraction``
    held back, a copy kept after each count in ``epochs`` (the same as a run of that many
    epochs: ``train_autoencoder``'s ``on_epoch``) and scored on the held-back rows: the
    reconstruction error (``validation_error``) and the accuracy of the classifier trained
    on the other rows' codes (``validation_accuracy``). Returns the table, one row per count,
    and the kept autoencoders by count."""
    wanted = sorted({check_int("epochs", e, 1) for e in epochs})
    split = _validation_split(data, float(fraction))
    kept: dict[int, AutoencoderResult] = {}

    def keep(result: AutoencoderResult) -> None:
        if len(result.epoch_loss) in wanted:
            kept[len(result.epoch_loss)] = result

    train_autoencoder(split.train, compressed.pca.k, epochs=wanted[-1], seed=seed, on_epoch=keep)
    rows = []
    for count in wanted:
        scores = _code_scores(split, compressed, kept[count], seed, device)
        rows.append({"epochs": count, "validation_error": scores["error"],
                     "validation_accuracy": scores["accuracy"]})  # fmt: skip
    return pd.DataFrame(rows), kept


_STUDY_COLUMNS = [
    "method", "epochs", "chosen", "seed", "k", "encoder_bytes", "validation_error",
    "validation_accuracy", "heldout_error", "test_accuracy", "chance_accuracy",
]  # fmt: skip


def _epochs_name(epochs: int) -> str:
    return f"autoencoder, {epochs} epoch{'s' * (epochs > 1)}"


def autoencoder_study(
    seeds: Sequence[int] = AUTOENCODER_SEEDS,
    epochs: Sequence[int] = AUTOENCODER_EPOCHS,
    *,
    data=None,
    compressed=None,
    device: torch.device | str | None = None,
) -> pd.DataFrame:
    """PCA against the autoencoder at its best epoch count, on the 10,000-word bag-of-words rows
    compressed to 300 dimensions. Per seed, :func:`autoencoder_epoch_grid` scores ``epochs`` on
    validation rows; the count with the lowest validation error averaged over the seeds is
    chosen (``chosen``), and only its autoencoders are scored on the held-out rows
    (``heldout_error``, ``test_accuracy``), beside PCA's (fitted on all training rows). One row
    per method and seed: PCA's, and one per epoch count, with held-out figures on the chosen
    count only (else NaN); no seconds (they depend on the machine's load)."""
    data = bag_of_words_data(10_000) if data is None else data
    compressed = compress_bag_of_words(data, 300) if compressed is None else compressed
    seeds = [check_int("seeds", s, 0) for s in seeds]
    runs = {s: autoencoder_epoch_grid(data, compressed, epochs, seed=s, device=device)
            for s in seeds}  # fmt: skip
    grid = pd.concat([table.assign(seed=s) for s, (table, _) in runs.items()])
    chosen = int(grid.groupby("epochs").validation_error.mean().idxmin())
    pca_error = compressed.pca.reconstruction_error(data.test)
    rows = []
    for seed in seeds:
        pca = projection_accuracy(data, compressed, variants=("pca_precomputed",), epochs=1,
                                  seed=seed, device=device).iloc[0]  # fmt: skip
        rows.append({"method": "PCA", "seed": seed,
                     "encoder_bytes": compressed.pca.projection_bytes,
                     "heldout_error": pca_error, "test_accuracy": pca.test_accuracy,
                     "chance_accuracy": pca.chance_accuracy})  # fmt: skip
        held_out = _code_scores(data, compressed, runs[seed][1][chosen], seed, device)
        for row in grid[grid.seed == seed].itertuples(index=False):
            best = row.epochs == chosen
            rows.append({"method": _epochs_name(row.epochs), "seed": seed, "epochs": row.epochs,
                         "chosen": best, "encoder_bytes": runs[seed][1][chosen].encoder_bytes,
                         "validation_error": row.validation_error,
                         "validation_accuracy": row.validation_accuracy,
                         "heldout_error": held_out["error"] if best else np.nan,
                         "test_accuracy": held_out["accuracy"] if best else np.nan,
                         "chance_accuracy": held_out["chance"]})  # fmt: skip
    frame = pd.DataFrame(rows).assign(k=compressed.pca.k)
    return frame.astype({"epochs": "Int64"})[_STUDY_COLUMNS]


def pca_row_check(record: pd.DataFrame, data, compressed, heldout_accuracy: float | None = None):
    """PCA's row of seed 0 in the autoencoder record against this run: its held-out
    reconstruction error from the fit in ``compressed`` and ``heldout_accuracy``, the held-out
    accuracy of the classifier on PCA codes trained one epoch with seed 0 (trained here when
    None). Returns the row and this run's two figures."""
    row = record[(record["method"] == "PCA") & (record["seed"] == 0)].iloc[0]
    if heldout_accuracy is None:
        heldout_accuracy = projection_accuracy(
            data, compressed, variants=("pca_precomputed",), epochs=1
        ).test_accuracy.iloc[0]
    error = float(compressed.pca.reconstruction_error(data.test))
    return row, {"heldout_error": error, "test_accuracy": float(heldout_accuracy)}


# --------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------


def benchmark() -> None:
    """The C28 measurement in one run: bag-of-words over 10,000 words, PCA to 300, four ways
    to feed it to a 128-wide layer: bytes and step time (for ``python -m chapter20 bench``)."""
    data = bag_of_words_data()
    print(data.describe())
    compressed = compress_bag_of_words(data, 300)
    print(f"{compressed.describe()}; fit {compressed.fit_seconds:.1f} s")
    table = sparse_projection_benchmark(data, compressed)
    for row in table.itertuples():
        print(
            f"  {row.variant:<16} layer {format_bytes(row.layer_bytes):>10}  "
            f"fixed {format_bytes(row.fixed_bytes):>10}  state {format_bytes(row.state_bytes):>10}"
            f"  step {row.step_ms:7.2f} ms ({row.time_vs_embedding_bag:.2f}× EmbeddingBag)"
        )


def autoencoder_benchmark(
    seeds: tuple[int, ...] = AUTOENCODER_SEEDS,
    epochs: tuple[int, ...] = AUTOENCODER_EPOCHS,
    out: str = "",
):
    """``chapter20 bench autoencoder``: :func:`autoencoder_study`, printed; with ``out`` written
    as ``data/autoencoder_vs_pca.csv`` reads."""
    frame = autoencoder_study(seeds, epochs)
    print(frame.round(4).to_string(index=False))
    if study_output(out):
        command = (
            f"chapter20 bench autoencoder --seeds {','.join(map(str, seeds))} "
            f"--epochs {','.join(map(str, epochs))}"
        )
        print("written:", write_study(frame, study_output(out), command))
