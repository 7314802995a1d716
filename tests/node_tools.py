"""Node.js tools installed from npm once per test session, for tests that run other languages' clients.

The packages go into one temporary folder for the whole session (``node_packages``), with
a bounded install time; without ``node``/``npm``, or when the npm registry cannot be
reached, the tests that need them are skipped with the reason.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

#: What the tests run: migrate-mongo 14 (itself on the official driver) and the official driver.
PACKAGES = ("migrate-mongo@14", "mongodb@7")
INSTALL_TIMEOUT = float(os.environ.get("MONGOSHIFT_TEST_NPM_TIMEOUT", "240"))


@dataclass(frozen=True)
class NodePackages:
    folder: Path

    @property
    def node_path(self) -> str:
        return str(self.folder / "node_modules")

    def bin(self, name: str) -> Path:
        return self.folder / "node_modules" / ".bin" / name

    def env(self) -> dict[str, str]:
        return {**os.environ, "NODE_PATH": self.node_path, "NO_COLOR": "1"}


def npm_install(folder: Path, *packages: str, timeout: float = INSTALL_TIMEOUT) -> None:
    """Install into ``folder`` or skip the calling test with the reason."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node and npm are not installed")
    folder.mkdir(parents=True, exist_ok=True)
    try:
        result = subprocess.run(
            ["npm", "install", "--no-audit", "--no-fund", "--no-save", "--loglevel=error", *packages],
            cwd=folder, capture_output=True, text=True, timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        pytest.skip(f"npm install {' '.join(packages)} did not finish in {timeout:.0f} s (registry unreachable?)")
    if result.returncode != 0:
        pytest.skip(f"npm install {' '.join(packages)} failed (registry unreachable?): {result.stderr.strip()[-300:]}")


@pytest.fixture(scope="session")
def node_packages(tmp_path_factory: pytest.TempPathFactory) -> NodePackages:
    folder = tmp_path_factory.mktemp("node-packages")
    npm_install(folder, *PACKAGES)
    return NodePackages(folder)
