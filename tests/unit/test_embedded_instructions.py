"""bench/embedded_instructions.py: the collections' share of a slice, and the host's last-level cache it simulates.

No valgrind: the listing's rows and the kernel's cache descriptions are made up, shaped as they come.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from ..scripts import load_script


@pytest.fixture(scope="module")
def instructions() -> ModuleType:
    return load_script("bench/embedded_instructions.py")


def test_a_collection_is_its_largest_inlined_part_not_the_sum_of_its_parts(instructions: ModuleType) -> None:
    # callgrind_annotate splits gc_collect_main by the files its inlined code comes from; each part's
    # inclusive count is inside the whole function's (the one that calls it: _Py_RunGC's is the same).
    rows = [
        ([54_555_875, 577_711], "Python/gc.c:_Py_RunGC"),
        ([54_555_823, 577_711], "Python/gc.c:gc_collect_main"),
        ([1_959_208, 65_090], "./Include/internal/pycore_gc.h:gc_collect_main"),
        ([158_421, 47_894], "./Include/object.h:gc_collect_main"),
        ([9_000_000, 10], "Objects/dictobject.c:insertdict"),
    ]
    assert instructions._collections(rows, ["Ir", "DLmr"]) == {"Ir": 54_555_823, "DLmr": 577_711}
    assert instructions._collections(rows[-1:], ["Ir", "DLmr"]) == {"Ir": 0, "DLmr": 0}


def test_the_last_level_simulated_is_the_hosts_largest_unified_cache(instructions: ModuleType, tmp_path: Path) -> None:
    for index, (level, kind, size, ways) in enumerate([(1, "Data", "48K", 12), (1, "Instruction", "32K", 8),
                                                       (2, "Unified", "1024K", 16), (3, "Unified", "32768K", 16)]):
        folder = tmp_path / f"index{index}"
        folder.mkdir()
        for name, value in {"level": level, "type": kind, "size": size, "ways_of_associativity": ways, "coherency_line_size": 64}.items():
            (folder / name).write_text(f"{value}\n")
    assert instructions._host_last_level(tmp_path) == ["--LL=33554432,16,64"]
    assert instructions._host_last_level(tmp_path / "absent") == []  # valgrind's own guess then


def test_a_last_level_whose_sets_are_no_power_of_two_is_given_as_valgrind_takes_one(instructions: ModuleType, tmp_path: Path) -> None:
    # a 300 MB, 20-way L3 has 245,760 sets of 64 bytes: valgrind refuses that --LL ("Cache set count is not a power of
    # two"), and the server never started; as valgrind does with its own guess, the sets go down to 131,072 and the
    # ways up to 38, which hold at least the cache's size
    for index, (level, kind, size, ways) in enumerate([(1, "Data", "48K", 12), (2, "Unified", "2048K", 16), (3, "Unified", "307200K", 20)]):
        folder = tmp_path / f"index{index}"
        folder.mkdir()
        for name, value in {"level": level, "type": kind, "size": size, "ways_of_associativity": ways, "coherency_line_size": 64}.items():
            (folder / name).write_text(f"{value}\n")
    option = instructions._host_last_level(tmp_path)
    assert option == ["--LL=318767104,38,64"]
    size, ways, line = (int(v) for v in option[0].removeprefix("--LL=").split(","))
    sets = size // (ways * line)
    assert sets * ways * line == size and sets & (sets - 1) == 0 and size >= 307200 * 1024
