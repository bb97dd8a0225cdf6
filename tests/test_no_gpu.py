"""Without a GPU the kit says so in one sentence and writes nothing."""

from __future__ import annotations

import pytest
from conftest import gpu_unavailable_reason

from kernelkit.cli import main


@pytest.mark.skipif(gpu_unavailable_reason() is None, reason="a GPU is visible here; this test is for machines without one")
@pytest.mark.parametrize("argv", [
    ["environment"],
    ["correctness", "--kernel", "rmsnorm"],
])
def test_gpu_stages_fail_with_one_sentence_and_no_file(tmp_path, capsys, argv):
    output = tmp_path / "out.json"
    assert main([*argv, "--output", str(output)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "CuPy is not installed" in err or "no usable NVIDIA GPU or driver" in err
    assert not output.exists()


@pytest.mark.parametrize("placements", ["0", "17"])
def test_time_refuses_a_placement_count_out_of_range_before_any_gpu_work(tmp_path, capsys, placements):
    """Checked first, so the answer is the same sentence with or without a GPU."""
    output = tmp_path / "out.json"
    argv = ["time", "--kernel", "rmsnorm", "--shape", "512x128", "--layout", "t32", "--placements", placements,
            "--correctness", str(tmp_path / "missing.json"), "--output", str(output)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--placements must be an integer from 1 to 16" in err and placements in err
    assert not output.exists()
