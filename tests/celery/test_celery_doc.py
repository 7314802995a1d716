"""docs/celery.md, run as written: its project, its app module, its worker command and its deploy script."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from .conftest import REDIS, REDIS_DB, forget_redis_queue, need

pytestmark = pytest.mark.celery

DOC = Path(__file__).resolve().parents[2] / "docs" / "celery.md"
BLOCK = re.compile(r"```(python|toml|bash)\n(.*?)```", re.S)


def test_the_example_runs_as_written(tmp_path: Path, mongo_uri: str, db_name: str, sync_client) -> None:  # type: ignore[no-untyped-def]
    need(REDIS, "Redis")
    text = DOC.read_text(encoding="utf-8")
    commands = []
    for kind, body in BLOCK.findall(text):
        first = body.splitlines()[0]
        if first.startswith("# file: "):
            path = tmp_path / first.removeprefix("# file: ").strip()
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(body, encoding="utf-8")
        elif kind == "bash":
            commands.append(body.strip())
    (worker_command,) = commands
    assert worker_command.startswith("celery ")
    queue = f"doc-{uuid.uuid4().hex[:10]}"
    broker = f"redis://{REDIS[0]}:{REDIS[1]}/{REDIS_DB}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MONGOSHIFT_")}
    env.update(MONGOSHIFT_URI=mongo_uri, MONGOSHIFT_DB=db_name, CELERY_BROKER_URL=broker, CELERY_RESULT_BACKEND=broker, MIGRATIONS_QUEUE=queue)
    args = shlex.split(worker_command)
    args[args.index("-Q") + 1] = queue  # this test's own queue
    log = (tmp_path / "worker.log").open("wb")
    worker = subprocess.Popen([sys.executable, "-m", *args], cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deploy = subprocess.run([sys.executable, "deploy.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
        assert deploy.returncode == 0, deploy.stderr[-2000:] + (tmp_path / "worker.log").read_text()[-2000:]
        lines = deploy.stdout.splitlines()
        assert lines[1].split()[:2] == ["20260101000001_add_status.py", "applied"]
        assert lines[2].split()[:2] == ["20260101000002_index_email.py", "applied"]
        again = subprocess.run([sys.executable, "deploy.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
        assert again.returncode == 0 and again.stdout.splitlines() == ["[] []"]
        assert "email_1" in sync_client[db_name].users.index_information()
    finally:
        worker.terminate()
        worker.wait(timeout=30)
        log.close()
        forget_redis_queue(queue)
        sync_client.drop_database(db_name)
