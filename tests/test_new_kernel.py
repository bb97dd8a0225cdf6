"""`kernelkit new`: the folder it writes is a kernel the config accepts (test_operations.py runs
the folder through every per-kernel check); bad names and existing folders are refused."""

from __future__ import annotations

import pytest

from kernelkit import KitError
from kernelkit import config as kit_config
from kernelkit.cli import main
from kernelkit.scaffold import write_folder


def test_the_new_folder_is_accepted_by_the_config_with_its_layout_and_a_shape(tmp_path, capsys):
    assert main(["new", "scaled", "--kernels", str(tmp_path)]) == 0
    assert sorted(p.name for p in (tmp_path / "scaled").iterdir()) == ["emulation.py", "scaled.cu", "spec.py"]
    assert "layouts: [t256]" in capsys.readouterr().out
    config = {"run": "x", "kernels": {"scaled": {"layouts": ["t256"], "shapes": ["16777216"]}},
              "timing": {"warmup_launches": 1, "launches_per_graph": 1, "samples": 1, "repeats": 1, "order_seed": 0}}
    assert kit_config.validate(config, kernels_root=tmp_path)["kernels"] == config["kernels"]


@pytest.mark.parametrize("name, expected", [("Scaled", "lower-case letters"), ("9lives", "starting with a letter"),
                                            ("a-b", "lower-case"), ("clocks", "reserved")])
def test_a_bad_name_is_refused_in_one_sentence(tmp_path, name, expected):
    with pytest.raises(KitError, match=expected):
        write_folder(name, tmp_path)
    assert not list(tmp_path.iterdir())


def test_an_existing_folder_is_never_overwritten(tmp_path, capsys):
    (tmp_path / "scaled").mkdir()
    (tmp_path / "scaled" / "mine.cu").write_text("// mine")
    assert main(["new", "scaled", "--kernels", str(tmp_path)]) == 2
    assert "already exists" in capsys.readouterr().err
    assert [p.name for p in (tmp_path / "scaled").iterdir()] == ["mine.cu"]
