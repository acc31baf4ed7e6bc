"""Cross-encoder reranker: device-aware resolution (student > bge on a big GPU > ms-marco > none) and loading.

Nothing here downloads: a hub model is used only when its files are already in the local Hugging Face cache,
which is checked on disk before anything is imported, so a missing model costs a stat() and not a 50 s retry.
Floors are on each model's native score scale (ms-marco and the student: the raw logit; bge: the sigmoid).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from cairn_cli.ml.device import apply_torch_threads, bf16_supported, offline

MSMARCO = "cross-encoder/ms-marco-MiniLM-L-6-v2"
BGE = "BAAI/bge-reranker-base"
STUDENT = "student"
NONE = "none"

_WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")


@dataclass(frozen=True)
class DeviceFacts:
    cuda: bool
    vram_gb: float


@dataclass
class Resolution:
    """Which reranker is live and why. `name` is what `reranker_model` records on each delivery."""

    role: str  # student | bge | msmarco | none
    name: str
    path: Path | None
    floor: float
    device: str
    activation: str  # identity | sigmoid: how the native score is read off the logit
    warnings: list[str] = field(default_factory=list)


def device_facts() -> DeviceFacts:
    """CUDA and its memory, asked of torch (the daemon has it loaded anyway)."""
    try:
        import torch
    except ImportError:
        from cairn_cli.errors import MissingDependency

        raise MissingDependency("torch is not installed", "pip install torch==2.13.0 (the CPU build)") from None
    if not torch.cuda.is_available():
        return DeviceFacts(False, 0.0)
    return DeviceFacts(True, torch.cuda.get_device_properties(0).total_memory / 2**30)


def _complete(path: Path) -> bool:
    return (path / "config.json").is_file() and any((path / f).is_file() for f in _WEIGHT_FILES)


def local_model_path(repo_id: str) -> Path | None:
    """The snapshot of `repo_id` (its `main` ref) in the local Hugging Face cache when its config and weights are
    there. The cache is huggingface_hub's own (HF_HUB_CACHE, HF_HOME, XDG_CACHE_HOME, ...); nothing is fetched."""
    from huggingface_hub import try_to_load_from_cache

    config = try_to_load_from_cache(repo_id, "config.json")
    if not isinstance(config, str):
        return None
    snapshot = Path(config).parent
    return snapshot if _complete(snapshot) else None


def missing_hint(repo_id: str) -> str:
    """How a user gets a cross-encoder cairn looks for: one download, online; cairn then loads it offline."""
    return (
        f"{repo_id} is not in the local Hugging Face cache: to use it, run `hf download {repo_id}` once "
        "(online); cairn then loads it from the cache, offline"
    )


def resolve_reranker(
    *,
    enabled: bool,
    student_path: str | Path,
    student_floor: float,
    bge_enabled: bool,
    min_vram_gb: float,
    floors: dict[str, float],
    facts: DeviceFacts | None = None,
    probe=local_model_path,
) -> Resolution:
    """Walk the chain; each model that is wanted but missing adds a warning and falls to the next."""
    warnings: list[str] = []
    if not enabled:
        return Resolution(NONE, NONE, None, float("-inf"), "cpu", "identity", ["reranker disabled"])
    student = Path(student_path).expanduser()
    if _complete(student):
        # the resolved directory: each deployed version is its own model in the provenance (and has its own floor)
        return Resolution(STUDENT, f"{STUDENT}:{student.resolve()}", student, student_floor, "auto", "identity")
    facts = facts if facts is not None else device_facts()
    if bge_enabled and facts.cuda and facts.vram_gb >= min_vram_gb:
        path = probe(BGE)
        if path is not None:
            return Resolution("bge", BGE, path, floors.get(BGE, 0.015), "cuda", "sigmoid")
        warnings.append(f"{missing_hint(BGE)}; falling back to {MSMARCO}")
    path = probe(MSMARCO)
    if path is not None:
        return Resolution(
            "msmarco", MSMARCO, path, floors.get(MSMARCO, -3.0), "cuda" if facts.cuda else "cpu", "identity", warnings
        )
    warnings.append(f"{missing_hint(MSMARCO)}; ranking with the composite only")
    return Resolution(NONE, NONE, None, float("-inf"), "cpu", "identity", warnings)


class CrossEncoderReranker:
    """A loaded cross-encoder: `score(query, texts)` returns each pair's native score (see Resolution)."""

    def __init__(self, resolution: Resolution, *, dtype: str = "auto", max_length: int = 256, batch_size: int = 32):
        offline()
        import torch
        from sentence_transformers import CrossEncoder
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()
        device = resolution.device if resolution.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
        self.use_bf16 = dtype == "bf16" or (dtype == "auto" and device == "cpu" and bf16_supported())
        self.model = CrossEncoder(
            str(resolution.path),
            device=device,
            max_length=max_length,
            activation_fn=torch.nn.Identity(),
            local_files_only=True,
        )
        self.model.model.eval()
        apply_torch_threads()
        if self.use_bf16:
            # bf16 weights, not autocast: autocast re-casts every weight on every call (measured ~18% slower)
            self.model.model.to(torch.bfloat16)
        self.name, self.floor, self.role = resolution.name, resolution.floor, resolution.role
        self.activation = resolution.activation
        self.batch_size = batch_size
        self.max_length = max_length
        self.device = device
        self.dtype = "bf16" if self.use_bf16 else "fp32"
        self._torch = torch

    def logits(self, query: str, texts: list[str]) -> list[float]:
        if not texts:
            return []
        pairs = [(query, t) for t in texts]
        with self._torch.inference_mode():
            out = self.model.predict(pairs, batch_size=self.batch_size, show_progress_bar=False, convert_to_numpy=True)
        return [float(x) for x in out.reshape(-1)]

    def score_from_logits(self, raw: list[float]) -> list[float]:
        """The native score the floor applies to."""
        if self.activation == "sigmoid":
            import math

            return [1.0 / (1.0 + math.exp(-x)) for x in raw]
        return raw
