"""Cross-encoder reranker: device-aware resolution (student > bge on a big GPU > ms-marco > none) and loading.

Nothing here downloads: a hub model is used only when its files are already in the local Hugging Face cache,
which is checked on disk before anything is imported, so a missing model costs a stat() and not a 50 s retry.
Floors are on each model's native score scale (ms-marco and the student: the raw logit; bge: the sigmoid).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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


PRECISIONS = ("fp32", "bf16", "int8")
_TOKEN_CACHE = 20_000  # memories' token ids kept (a memory is tokenised once)
_OBSERVED = 50  # stage calls kept for the plan to learn its margin from (core/ranking/plan.py)
_SCORE_CACHE = 50_000  # (window, memory, variant) -> logit kept: a retried or repeated prompt costs nothing


class _Lru(dict):
    """A dict that forgets its oldest entries beyond `size` (insertion order; hot keys are re-inserted)."""

    def __init__(self, size: int):
        super().__init__()
        self.size = size

    def put(self, key, value) -> None:
        self.pop(key, None)
        self[key] = value
        if len(self) > self.size:
            del self[next(iter(self))]


class CrossEncoderReranker:
    """A loaded cross-encoder, in every precision this machine can run.

    `logits(query, texts, prompt=, precision=, max_length=)` scores (window, memory) pairs. A pair is bounded at
    `max_length` tokens: the prompt is kept whole (unless it alone is longer than the bound), then the memory, then
    the rest of the window from its newest end (the window is the prompt followed by earlier turns newest first, so
    its oldest end goes first). Memories are tokenised once; scores are cached per (window, memory, variant).
    Precisions: fp32 (as trained), bf16 weights (only where the CPU really has AVX-512 BF16 / AMX), int8 dynamic
    quantisation of the Linear layers. `plan` (set by the ranking side) says which precision, how many candidates
    and which max length the live stage uses.
    """

    def __init__(self, resolution: Resolution, *, dtype: str = "auto", max_length: int = 128, batch_size: int = 32):
        offline()
        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()
        device = resolution.device if resolution.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
        self.tokenizer = AutoTokenizer.from_pretrained(str(resolution.path), local_files_only=True)
        self._auto_model = AutoModelForSequenceClassification
        self.device = device
        self.path = resolution.path
        apply_torch_threads()
        self._torch = torch
        self._variants: dict[str, Any] = {"fp32": self._load_fp32()}
        self.name, self.floor, self.role = resolution.name, resolution.floor, resolution.role
        self.activation = resolution.activation
        self.batch_size = batch_size
        self.max_length = max_length
        self.dtype = "bf16" if dtype == "bf16" or (dtype == "auto" and device == "cpu" and bf16_supported()) else "fp32"
        self.plan: dict | None = None  # {"precision", "candidates", "max_length"}: the budgeted stage
        self.observed: list[tuple[int, float]] = []  # (pairs scored, seconds) of the planned stage's recent calls
        self._special = self.tokenizer.num_special_tokens_to_add(pair=True)
        self._template = self._pair_template()
        self._tokens = _Lru(_TOKEN_CACHE)
        self._scores = _Lru(_SCORE_CACHE)

    # -- precisions -----------------------------------------------------------------------------------------
    def available(self) -> list[str]:
        """The precisions this machine can run (bf16 only with the CPU flags for it; int8 on CPU only)."""
        out = ["fp32"]
        if self.device == "cuda" or bf16_supported():
            out.append("bf16")
        if self.device == "cpu":
            out.append("int8")
        return out

    def _load_fp32(self):
        """The model as trained, read from its weights on disk."""
        model = self._auto_model.from_pretrained(str(self.path), local_files_only=True)
        return model.to(self.device).eval()

    def variant(self, precision: str):
        """The model in `precision`, made once from the fp32 weights (read again from disk if they were let go)."""
        if precision not in PRECISIONS:
            from cairn_cli.errors import ConfigError

            raise ConfigError(f"unknown reranker precision {precision!r}", f"use one of {', '.join(PRECISIONS)}")
        if precision not in self._variants:
            import copy

            fp32 = self._variants["fp32"] if "fp32" in self._variants else self._load_fp32()
            if precision == "fp32":
                self._variants["fp32"] = fp32
            elif precision == "bf16":
                self._variants["bf16"] = copy.deepcopy(fp32).to(self._torch.bfloat16).eval()
            elif precision == "int8":
                import warnings

                with warnings.catch_warnings():  # torch announces the move of eager quantisation to torchao
                    warnings.simplefilter("ignore")
                    self._variants["int8"] = self._torch.ao.quantization.quantize_dynamic(
                        copy.deepcopy(fp32), {self._torch.nn.Linear}, dtype=self._torch.qint8
                    ).eval()
        return self._variants[precision]

    def keep_only(self, precision: str) -> None:
        """Free the variants the plan does not use, fp32 included (~90 MB for a MiniLM-L6): a precision asked for
        later is made again from the weights on disk."""
        self.variant(precision)
        for name in list(self._variants):
            if name != precision:
                del self._variants[name]

    # -- scoring --------------------------------------------------------------------------------------------
    def _pair_template(self) -> tuple[list[int], list[int], list[int], int]:
        """(prefix, middle, suffix, second segment's token type) of this tokenizer's pair layout, read off a
        tokenised pair (e.g. BERT: [CLS] a [SEP] b [SEP], types 0/1; XLM-R: <s> a </s></s> b </s>, no types)."""
        a = self.tokenizer("a", add_special_tokens=False)["input_ids"]
        b = self.tokenizer("b", add_special_tokens=False)["input_ids"]
        enc = self.tokenizer("a", "b")
        ids = enc["input_ids"]
        i = next(i for i in range(len(ids)) if ids[i : i + len(a)] == a)
        j = next(j for j in range(i + len(a), len(ids)) if ids[j : j + len(b)] == b)
        types = enc.get("token_type_ids") or [0] * len(ids)
        return ids[:i], ids[i + len(a) : j], ids[j + len(b) :], types[j]

    def _pair(self, first: list[int], second: list[int]) -> tuple[list[int], list[int]]:
        prefix, middle, suffix, second_type = self._template
        ids = prefix + first + middle + second + suffix
        cut = len(prefix) + len(first) + len(middle)
        return ids, [0] * cut + [second_type] * (len(ids) - cut)

    def _ids(self, text: str) -> list[int]:
        ids = self._tokens.get(text)
        if ids is None:
            ids = self.tokenizer(text, add_special_tokens=False, truncation=False)["input_ids"]
            self._tokens.put(text, ids)
        return ids

    def pair_ids(self, query: str, text: str, max_length: int, prompt: str | None = None) -> tuple[list[int], list]:
        """(input ids, token type ids) of one pair bounded at max_length: prompt, then memory, then history."""
        budget = max(2, max_length - self._special)
        if prompt and query.startswith(prompt):
            head, rest = self.tokenizer(prompt, add_special_tokens=False)["input_ids"], query[len(prompt) :]
            history = self.tokenizer(rest, add_special_tokens=False)["input_ids"] if rest.strip() else []
        else:
            head, history = self.tokenizer(query, add_special_tokens=False)["input_ids"], []
        memory = self._ids(text)
        min_memory = min(len(memory), max(1, budget // 4))
        head = head[: budget - min_memory]
        memory = memory[: budget - len(head)]
        window = head + history[: budget - len(head) - len(memory)]
        return self._pair(window, memory)

    def _forward(self, model, pairs: list[tuple[list[int], list]]) -> list[float]:
        torch = self._torch
        out: list[float] = []
        pad = self.tokenizer.pad_token_id or 0
        for start in range(0, len(pairs), self.batch_size):
            batch = pairs[start : start + self.batch_size]
            width = max(len(ids) for ids, _ in batch)
            ids = torch.full((len(batch), width), pad, dtype=torch.long)
            types = torch.zeros((len(batch), width), dtype=torch.long)
            mask = torch.zeros((len(batch), width), dtype=torch.long)
            for row, (i, t) in enumerate(batch):
                ids[row, : len(i)] = torch.tensor(i)
                types[row, : len(t)] = torch.tensor(t)
                mask[row, : len(i)] = 1
            inputs = {"input_ids": ids, "attention_mask": mask}
            if "token_type_ids" in self.tokenizer.model_input_names:
                inputs["token_type_ids"] = types
            with torch.inference_mode():
                logits = model(**{k: v.to(self.device) for k, v in inputs.items()}).logits
            out.extend(float(x) for x in logits.float().reshape(-1).tolist())
        return out

    def logits(
        self,
        query: str,
        texts: list[str],
        *,
        prompt: str | None = None,
        precision: str | None = None,
        max_length: int | None = None,
        cache: bool = True,
    ) -> list[float]:
        """Raw logits of (query, text) pairs in `precision` (default: the plan's, else the configured dtype) at
        `max_length` tokens (default: the plan's, else the configured bound)."""
        return self.logits_many([(query, texts, prompt)], precision=precision, max_length=max_length, cache=cache)[0]

    def logits_many(
        self,
        requests: list[tuple[str, list[str], str | None]],
        *,
        precision: str | None = None,
        max_length: int | None = None,
        cache: bool = True,
    ) -> list[list[float]]:
        """`logits` of several (query, texts, prompt) requests in one forward pass (the daemon's concurrent
        prompts): their pairs not in the cache are scored together, shortest first (less padding per batch)."""
        plan = self.plan or {}
        precision = precision or plan.get("precision") or self.dtype
        max_length = max_length or plan.get("max_length") or self.max_length
        import hashlib

        outs: list[list[float | None]] = []
        todo: list[tuple[int, int, tuple]] = []  # (request, position, cache key) of each pair to score
        pairs = []
        for r, (query, texts, prompt) in enumerate(requests):
            qkey = hashlib.blake2b(f"{prompt}\x00{query}".encode("utf-8", "replace"), digest_size=12).digest()
            keys = [(qkey, t, precision, max_length) for t in texts]
            out: list[float | None] = [self._scores.get(k) if cache else None for k in keys]
            for i, v in enumerate(out):
                if v is None:
                    todo.append((r, i, keys[i]))
                    pairs.append(self.pair_ids(query, texts[i], max_length, prompt))
            outs.append(out)
        if todo:
            import time

            t0 = time.perf_counter()
            order = sorted(range(len(pairs)), key=lambda j: len(pairs[j][0]))
            scores = self._forward(self.variant(precision), [pairs[j] for j in order])
            for j, score in zip(order, scores):
                r, i, key = todo[j]
                outs[r][i] = score
                if cache:
                    self._scores.put(key, score)
            if cache and plan and (precision, max_length) == (plan.get("precision"), plan.get("max_length")):
                self.observed = [*self.observed[-(_OBSERVED - 1) :], (len(todo), time.perf_counter() - t0)]
        return [[float(v) for v in out if v is not None] for out in outs]

    def time_call(self, precision: str, max_length: int, n: int, repeats: int = 3) -> float:
        """Median seconds of one stage call: `n` pairs of `max_length` tokens in `precision`, caches bypassed."""
        import statistics
        import time

        filler = self.tokenizer("the tests fail when the database is not started", add_special_tokens=False)
        word = filler["input_ids"] or [self.tokenizer.unk_token_id or 100]
        body = (word * (max_length // max(1, len(word)) + 2))[: max(1, max_length - self._special - 24)]
        memory = (word * 4)[:24]
        pairs = [self._pair(body, memory) for _ in range(n)]
        model = self.variant(precision)
        self._forward(model, pairs)  # warm
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            self._forward(model, pairs)
            times.append(time.perf_counter() - t0)
        return statistics.median(times)

    def checksum(self) -> str:
        """The weights' identity (size and content hash of the weights file), for caching measurements."""
        import hashlib

        if self.path is None:
            return "none"
        for name in _WEIGHT_FILES:
            f = Path(self.path) / name
            if f.is_file():
                h = hashlib.sha256()
                with f.open("rb") as fh:
                    for chunk in iter(lambda: fh.read(1 << 20), b""):
                        h.update(chunk)
                return h.hexdigest()[:16]
        return "none"

    def score_from_logits(self, raw: list[float]) -> list[float]:
        """The native score the floor applies to."""
        if self.activation == "sigmoid":
            import math

            return [1.0 / (1.0 + math.exp(-x)) for x in raw]
        return raw
