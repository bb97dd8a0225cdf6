"""Result files are written whole or not at all."""

from __future__ import annotations

import json
import os

import pytest

from kernelkit import KitError
from kernelkit.records import read_json, write_json_atomic


def test_write_then_read_round_trip(tmp_path):
    path = tmp_path / "deep" / "dir" / "result.json"
    write_json_atomic(path, {"samples_us": [1.5, 2.25]})
    assert read_json(path) == {"samples_us": [1.5, 2.25]}
    assert os.listdir(path.parent) == ["result.json"]


def test_interrupted_write_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "result.json"
    write_json_atomic(path, {"version": 1})

    def interrupted(src, dst):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_json_atomic(path, {"version": 2})
    assert json.loads(path.read_text()) == {"version": 1}
    assert os.listdir(tmp_path) == ["result.json"]


def test_nan_is_refused_rather_than_written_as_invalid_json(tmp_path):
    with pytest.raises(ValueError):
        write_json_atomic(tmp_path / "x.json", {"median": float("nan")})
    assert not list(tmp_path.iterdir())


def test_unreadable_result_names_the_file(tmp_path):
    broken = tmp_path / "broken.json"
    broken.write_text("{\"samples_us\": [1.0,")
    with pytest.raises(KitError, match="broken.json is not valid JSON"):
        read_json(broken)
    with pytest.raises(KitError, match="missing.json does not exist"):
        read_json(tmp_path / "missing.json")
