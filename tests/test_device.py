"""ml/device.py: `drop_clean_mapping` drops the resident pages of a private file mapping this process never wrote
(they come back from the file as they were) and refuses a written one; `one_thread_if` narrows torch to one thread
for a small call and gives the count back."""

import ctypes
import mmap
import os
import sys

import pytest

from cairn_cli.ml.device import drop_clean_mapping

LINUX = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/smaps (Linux)")

PAGES = 64


def _resident_kb(address: int) -> int:
    with open("/proc/self/smaps", encoding="utf-8") as fh:
        lines = fh.read().splitlines()
    for i, line in enumerate(lines):
        parts = line.split()
        if parts and "-" in parts[0] and ":" not in parts[0]:
            start, end = (int(x, 16) for x in parts[0].split("-"))
            if start <= address < end:
                rss = next(row for row in lines[i + 1 :] if row.startswith("Rss:"))
                return int(rss.split()[1])
    raise AssertionError("no mapping holds the address")


@pytest.fixture
def mapped(tmp_path):
    """A file of PAGES pages mapped privately (as safetensors maps a model's weights), every page read."""
    path = tmp_path / "weights.bin"
    path.write_bytes(bytes(range(256)) * (PAGES * mmap.PAGESIZE // 256))
    fd = os.open(path, os.O_RDONLY)
    try:
        view = mmap.mmap(fd, 0, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    finally:
        os.close(fd)
    assert sum(view[i] for i in range(0, len(view), mmap.PAGESIZE)) >= 0  # every page read: resident
    anchor = ctypes.c_char.from_buffer(view)
    yield view, ctypes.addressof(anchor)
    del anchor
    view.close()


@LINUX
def test_a_clean_private_file_mapping_is_dropped_and_reads_back_the_same(mapped):
    view, address = mapped
    before = _resident_kb(address)
    assert before >= PAGES * mmap.PAGESIZE // 1024
    assert drop_clean_mapping(address + 5 * mmap.PAGESIZE) == before  # any address inside names the mapping
    assert _resident_kb(address) < before
    assert view[: 256 * 4] == bytes(range(256)) * 4 and view[-1] == 255


@LINUX
def test_a_written_mapping_or_an_address_outside_any_file_mapping_is_refused(mapped):
    view, address = mapped
    view[0] = 7  # written: its page is the process's own now, dropping it would lose the write
    before = _resident_kb(address)
    assert drop_clean_mapping(address) == 0
    assert view[0] == 7 and _resident_kb(address) == before
    heap = ctypes.create_string_buffer(1 << 20)  # anonymous memory: never dropped
    assert drop_clean_mapping(ctypes.addressof(heap)) == 0


def test_a_small_call_runs_on_one_torch_thread_and_the_count_comes_back():
    import torch

    from cairn_cli.ml.device import one_thread_if

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with one_thread_if(True):
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == 2
        with one_thread_if(False):
            assert torch.get_num_threads() == 2
        with pytest.raises(RuntimeError), one_thread_if(True):
            raise RuntimeError("a failed call")
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
