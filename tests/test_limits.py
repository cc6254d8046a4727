"""kiln/limits.py: sizes read from files checked before allocating, with one clear error."""

import os

import numpy as np
import pytest

from kiln import config, limits
from kiln.errors import FileFormatError, KilnError, SizeLimitError


def test_fits_accepts_what_the_file_holds_and_refuses_more():
    assert limits.fits(100, 100, file="m.params", field="data") == 100
    assert limits.fits(np.uint64(7), 8, file="m.params", field="data") == 7
    with pytest.raises(SizeLimitError, match=r"^m\.params: arrays\[2\]\.data declares 101 bytes but only 100 remain"):
        limits.fits(101, 100, file="m.params", field="arrays[2].data")


@pytest.mark.parametrize("bad", [-1, 2.5, "3", None, True, [1]])
def test_counts_must_be_non_negative_integers(bad):
    with pytest.raises(FileFormatError, match=r"^g\.json: nodes\[0\]\.shape"):
        limits.count(bad, file="g.json", field="nodes[0].shape")


def test_shape_products_do_not_wrap_and_are_checked_against_the_limit():
    # 2**32 * 2**32 wraps to 0 in 64 bits; Python ints keep it and the limit refuses it.
    assert limits.nbytes((1 << 32, 1 << 32), 4, file="f", field="s") == 1 << 66
    with pytest.raises(SizeLimitError, match=r"f: s needs 64\.0 GiB .* raise KILN_LOAD_LIMIT"):
        limits.tensor((1 << 14, 1 << 20), 4, file="f", field="s")
    with pytest.raises(FileFormatError, match=r"s\[1\] is -3"):
        limits.tensor((2, -3), 4, file="f", field="s")
    assert limits.tensor((), 8, file="f", field="s") == 8


def test_expansion_limit_follows_the_file_size_and_the_settings():
    with config.override(load_expansion=64 << 20, load_limit=4 << 30):
        assert limits.expansion_limit(116) == 64 << 20
        assert limits.expansion_limit(100 << 20) == 800 << 20
        assert limits.expansion_limit(1 << 30) == 4 << 30  # capped by the load limit
    with config.override(load_expansion=1 << 30):
        assert limits.expansion_limit(116) == 1 << 30


def test_settings_parse_sizes_and_refuse_garbage(monkeypatch):
    monkeypatch.setenv("KILN_LOAD_LIMIT", "512M")
    monkeypatch.setenv("KILN_LOAD_EXPANSION", "1G")
    cfg = config._from_env()
    assert (cfg.load_limit, cfg.load_expansion) == (512 << 20, 1 << 30)
    monkeypatch.setenv("KILN_LOAD_LIMIT", "lots")
    with pytest.raises(ValueError, match="KILN_LOAD_LIMIT='lots' must be a size"):
        config._from_env()


def test_file_size_names_folders_and_missing_files(tmp_path):
    (tmp_path / "x.onnx").write_bytes(b"abc")
    assert limits.file_size(tmp_path / "x.onnx") == 3
    with pytest.raises(FileFormatError, match="is a directory, not a file"):
        limits.file_size(tmp_path)
    with pytest.raises(FileFormatError, match="does not exist"):
        limits.file_size(tmp_path / "nope.onnx")


def test_errors_are_kiln_errors_with_one_line():
    err = limits.fail("m.h5", "model_config", "is not JSON", "re-save the model with model.save('x.h5')")
    assert isinstance(err, KilnError) and "\n" not in str(err)
    assert str(err) == "m.h5: model_config: is not JSON; re-save the model with model.save('x.h5')"
