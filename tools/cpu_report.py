"""Sum the per-test CPU report of ``tests/cpu_report.py`` by test file and show the costliest tests.

Usage: ``MONGOSHIFT_CPU_REPORT=/some/dir/cpu python -m pytest -p tests.cpu_report`` then
``python tools/cpu_report.py /some/dir/cpu`` (it reads every worker's ``cpu.gwN`` file).
"""

from __future__ import annotations

import glob
import json
import sys
from collections import Counter


def main(prefix: str, top: int = 25) -> None:
    by_test: dict[str, float] = {}
    for path in glob.glob(prefix + ".*"):
        with open(path, encoding="utf-8") as report:
            for line in report:
                row = json.loads(line)
                by_test[row["test"]] = by_test.get(row["test"], 0.0) + row["cpu"]
    by_file: Counter[str] = Counter()
    for test, cpu in by_test.items():
        by_file[test.split("::")[0]] += cpu
    print(f"{len(by_test)} tests, {sum(by_test.values()):.0f} s of CPU in all\n")
    print("by file:")
    for name, cpu in by_file.most_common(top):
        print(f"{cpu:8.1f} s  {name}")
    print("\nby test:")
    for name, cpu in sorted(by_test.items(), key=lambda kv: -kv[1])[:top]:
        print(f"{cpu:8.1f} s  {name}")


if __name__ == "__main__":
    main(sys.argv[1], *(int(a) for a in sys.argv[2:3]))
