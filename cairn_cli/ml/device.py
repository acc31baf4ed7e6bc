"""What this machine can run, asked of the machine and never assumed: its CPU flags (bf16 only where the CPU
really has AVX-512 BF16 or AMX), and the one place torch's intra-op thread count is set (and numpy's BLAS kept to
one thread beside it). Also the offline switch every model load goes through. Stdlib at import (torch only when
threads are applied)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache

_BF16_FLAGS = ("avx512_bf16", "amx_bf16")
_threads_wanted = 0  # 0: min(4, the cores)
_blas_limited = False


def offline() -> None:
    """Nothing is ever fetched from a hub: set before transformers / sentence-transformers are imported."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@lru_cache(maxsize=1)
def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags (Linux /proc/cpuinfo; empty elsewhere)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def bf16_supported() -> bool:
    """AVX-512 BF16 or AMX on this CPU."""
    return any(flag in cpu_flags() for flag in _BF16_FLAGS)


def simd_summary() -> str:
    """The flags that decide a CPU model's speed, for every timing cairn reports (e.g. "avx2 avx512f avx512_bf16")."""
    wanted = ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16", "amx_int8")
    return " ".join(f for f in wanted if f in cpu_flags()) or "none of avx2/avx512"


def idle_threads_sleep() -> bool:
    """OpenMP's idle threads sleep instead of spinning (OMP_WAIT_POLICY=PASSIVE, unless the environment says
    otherwise), for a process that shares its cores with others while it serves (the daemon and the hooks'
    processes). libgomp spins its threads for a while after every parallel region: with two cores, a warm daemon's
    spinning threads held the cores the hooks' processes needed, and at 16 sessions side by side (each prompting
    every ~2 s, MiniLM embedding, no cross-encoder) hook prompt p95 was 3.5-4 s with a half of the prompts past the
    client's deadline; sleeping, p95 0.1-0.2 s and every prompt answered. Idle, it costs a few ms a model call
    (MiniLM prompt embedding 7.5 -> 13 ms, 12 cross-encoder pairs 128 -> 139 ms here). libgomp reads it when torch
    loads: False when torch is already loaded (nothing changed)."""
    import sys

    if "torch" in sys.modules:
        return False
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    return True


def set_torch_threads(n: int) -> None:
    """The wish for torch's intra-op threads (CAIRN_TORCH_THREADS; 0: min(4, the cores)), applied now when torch is
    loaded and again after every model load (loading a model must never reset it)."""
    global _threads_wanted
    _threads_wanted = max(0, int(n))
    apply_torch_threads()


def apply_torch_threads() -> int | None:
    """Apply the wish; returns torch's thread count, or None when torch is not loaded in this process."""
    import sys

    torch = sys.modules.get("torch")
    if torch is None:
        return None
    n = _threads_wanted or max(1, min(4, os.cpu_count() or 1))
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)
    limit_blas_threads()
    return torch.get_num_threads()


def limit_blas_threads() -> None:
    """numpy's BLAS (OpenBLAS) to one thread in a process that runs torch. Its idle threads spin-wait for a while
    after a matmul, on the cores torch is about to use: on this 2-core machine the composite's 10k x 384 matvec just
    before the rerank stage took that stage from 68 to 126 ms p50 (bench/hot_path.md). One thread does the matvec
    in about a millisecond."""
    global _blas_limited
    if _blas_limited:
        return
    try:
        from threadpoolctl import threadpool_limits

        threadpool_limits(1, user_api="blas")  # applied now, kept for the process's life
    except Exception:  # no threadpoolctl, or a BLAS it cannot drive: the stage is only slower
        return
    _blas_limited = True


def _libc():
    """The C library (glibc on Linux), or None where it cannot be loaded."""
    import ctypes
    import ctypes.util

    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None


def release_freed_memory() -> bool:
    """Hand the heap's freed pages back to the system (glibc's malloc_trim): a model's discarded precisions and the
    planning's activations are freed but stay resident until then. False where there is no glibc."""
    libc = _libc()
    try:
        return bool(libc is not None and libc.malloc_trim(0))
    except AttributeError:
        return False


MADV_DONTNEED = 4  # Linux


def drop_clean_mapping(address: int) -> int:
    """Drop this process's resident pages of the private file mapping that holds `address` (a model's weights read
    from a memory-mapped safetensors file), when this process wrote none of its pages: such a page comes back from
    the file, as it was, the next time it is read. The bf16 encoder (ml/models.py) converts its linear layers out of
    the mapping, which the embeddings keep alive: the fp32 pages the conversion read stay resident (~42 MB for a
    MiniLM-L6) until dropped. Returns the kB dropped; 0 when nothing was (another system, an anonymous or written
    mapping)."""
    import ctypes
    import re

    try:
        with open("/proc/self/smaps", encoding="utf-8", errors="replace") as fh:
            blocks = re.split(r"\n(?=[0-9a-f]+-[0-9a-f]+ )", fh.read())
    except OSError:
        return 0
    for block in blocks:
        head = block.split("\n", 1)[0].split()
        start, end = (int(x, 16) for x in head[0].split("-"))
        if not start <= address < end:
            continue
        fields = dict(re.findall(r"^(\w+):\s+(\d+) kB", block, re.M))
        private_file = len(head) >= 6 and head[5].startswith("/") and head[1].endswith("p")
        # a page this process wrote is its own copy (Anonymous); Private_Dirty also counts a page the file's writer
        # has not flushed yet, which is the file's and comes back as it is
        if not private_file or int(fields.get("Anonymous", 1)):
            return 0
        libc = _libc()
        try:
            failed = libc is None or libc.madvise(ctypes.c_void_p(start), ctypes.c_size_t(end - start), MADV_DONTNEED)
        except AttributeError:
            return 0
        return 0 if failed else int(fields.get("Rss", 0))
    return 0


@contextmanager
def one_thread_if(small: bool) -> Iterator[None]:
    """torch on one thread for the block when `small` (a call of a few dozen tokens), then as many as before. With
    OpenMP's threads asleep between calls (`idle_threads_sleep`), every matmul of a short input woke the other thread
    for less work than the wake costs: a prompt of ~15 tokens embedded in 14.6 ms on one thread against 16.8 on two,
    ~97 tokens 26.2 against 32.0, even at ~190, two ahead from ~280 (MiniLM-L6 bf16 here, caches flushed between
    calls, the two interleaved). The calling thread's count alone changes (OpenMP's is per thread)."""
    import sys

    torch = sys.modules.get("torch")
    if torch is None or not small or torch.get_num_threads() <= 1:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)
