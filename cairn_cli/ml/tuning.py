"""Contrastive fine-tuning of the bi-encoder on graded pairs (plain torch on the sentence-transformers model already
loaded: no `sentence-transformers[train]`). The learned embedder of core/learning/embedder.py; more in
docs/learning.md."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass

from cairn_cli.ml.device import apply_torch_threads
from cairn_cli.ml.models import SentenceEncoder
from cairn_cli.ml.student import TrainStats, _peak_rss_mb


@dataclass
class TuneOptions:
    """How the bi-encoder is tuned. Measured on #27's ablation (bench/learners.md: 2,002 oracle labels of the
    replayed LoCoMo conversations, questions of three conversations never replayed): one pass at lr 2e-5 with the
    embeddings and the lower 3 of 6 layers frozen lifts unseen questions in both forms; the frozen half keeps the
    tuned model near the pretrained one (what it knows of language stays; the upper layers learn what is relevant
    here) and halves training's memory."""

    epochs: int = 1
    batch_size: int = 16
    lr: float = 2e-5
    temperature: float = 0.05  # InfoNCE: the cosines are scaled by 1 / this
    frozen_layers: int = 3  # the embeddings and this many lower transformer layers are not trained
    seed: int = 13


def tune_encoder(
    base: SentenceEncoder,
    triples: list[tuple[str, str, str]],
    weights: list[float],
    name: str,
    opts: TuneOptions,
    *,
    progress: Callable[[int], None] | None = None,
) -> tuple[SentenceEncoder, TrainStats]:
    """A copy of `base` fine-tuned on (query, better, worse) triples: per triple, InfoNCE of the query over its better
    text against its worse one and every other text of the batch (in-batch negatives), the loss times the triple's
    weight (mean 1: core/learning/pairs.py). Returns the tuned encoder, named `name`, in eval mode, and its cost."""
    import torch

    if len(weights) != len(triples):
        raise ValueError(f"{len(weights)} weights for {len(triples)} triples")
    torch.manual_seed(opts.seed)
    rng = random.Random(opts.seed)
    model = base.trainable()
    bert = model[0].auto_model
    frozen = [*bert.embeddings.parameters()] if opts.frozen_layers else []
    for layer in bert.encoder.layer[: opts.frozen_layers]:
        frozen.extend(layer.parameters())
    for prm in frozen:
        prm.requires_grad = False
    trained = [prm for prm in model.parameters() if prm.requires_grad]
    optim = torch.optim.AdamW(trained, lr=opts.lr, weight_decay=0.01)
    order = list(zip(triples, weights))
    apply_torch_threads()

    def embed(texts: list[str]):
        features = model.tokenize(texts)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=base.bf16):
            out = model(features)["sentence_embedding"].float()
        return torch.nn.functional.normalize(out, dim=-1)

    model.train()
    t0, steps, loss_value = time.time(), 0, float("nan")
    for _ in range(opts.epochs):
        rng.shuffle(order)
        for start in range(0, len(order), opts.batch_size):
            chunk = order[start : start + opts.batch_size]
            batch = [t for t, _ in chunk]
            queries = embed([q for q, _, _ in batch])
            docs = embed([b for _, b, _ in batch] + [w for _, _, w in batch])
            logits = queries @ docs.T / opts.temperature  # row i: its better at column i, every other text a negative
            losses = torch.nn.functional.cross_entropy(logits, torch.arange(len(batch)), reduction="none")
            loss = (losses * torch.tensor([w for _, w in chunk])).mean()
            optim.zero_grad()
            loss.backward()
            optim.step()
            steps += 1
            loss_value = float(loss.detach())
            if progress:
                progress(len(batch))
    model.eval()
    for prm in frozen:
        prm.requires_grad = True
    del optim  # the optimiser's state is training's alone: the gate ranks without it in memory
    stats = TrainStats(
        len(triples),
        steps,
        round(time.time() - t0, 1),
        round(loss_value, 4),
        round(_peak_rss_mb(), 1),
        "cpu",
        base.bf16,
    )
    return SentenceEncoder(name=name, model=model, dim=base.dim, bf16=base.bf16), stats


def save_encoder(encoder: SentenceEncoder, path) -> None:
    """The tuned model as a sentence-transformers directory (what ml/models.get_encoder loads a version from), its
    files on disk before a rename or a link publishes it."""
    import os
    from pathlib import Path

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    encoder.model.save(str(path))
    for file in path.rglob("*"):
        if file.is_file():
            with open(file, "rb") as fh:
                os.fsync(fh.fileno())
