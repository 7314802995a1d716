from pathlib import Path

import pytest

from mongoshift.errors import ConfigInvalidError
from mongoshift.project.settings import load_settings


def test_the_changed_file_wait_defaults_to_five_minutes_and_is_validated(tmp_path: Path) -> None:
    assert load_settings({}, environ={}, cwd=tmp_path).background_checksum_wait_seconds == 300
    env = {"MONGOSHIFT_BACKGROUND_CHECKSUM_WAIT_SECONDS": "2.5"}
    assert load_settings({}, environ=env, cwd=tmp_path).background_checksum_wait_seconds == 2.5
    for bad in ("-1", "soon", "100000"):
        with pytest.raises(ConfigInvalidError, match="MONGOSHIFT_BACKGROUND_CHECKSUM_WAIT_SECONDS"):
            load_settings({}, environ={"MONGOSHIFT_BACKGROUND_CHECKSUM_WAIT_SECONDS": bad}, cwd=tmp_path)
    (tmp_path / "mongoshift.toml").write_text("[mongoshift]\nbackground_checksum_wait_seconds = -5\n", encoding="utf-8")
    with pytest.raises(ConfigInvalidError, match="background_checksum_wait_seconds"):
        load_settings({}, environ={}, cwd=tmp_path)
