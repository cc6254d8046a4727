import io
import os
import tarfile

import pytest

from kiln.contrib import tar, utils
from kiln.errors import KilnError


def test_tar_roundtrip(tmp_path):
    (tmp_path / "a.o").write_bytes(b"A")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.json").write_text("{}")
    archive = str(tmp_path / "x.tar")
    tar.tar(archive, [str(tmp_path / "a.o"), str(tmp_path / "sub" / "b.json")])
    out = tmp_path / "out"
    assert sorted(tar.untar(archive, str(out))) == ["a.o", "b.json"]
    assert (out / "a.o").read_bytes() == b"A" and (out / "b.json").read_text() == "{}"


def test_tar_rejects_duplicate_names(tmp_path):
    (tmp_path / "d1").mkdir()
    (tmp_path / "d2").mkdir()
    for d in ("d1", "d2"):
        (tmp_path / d / "lib0.o").write_bytes(b"x")
    with pytest.raises(ValueError, match="two inputs share a file name"):
        tar.tar(str(tmp_path / "x.tar"), [str(tmp_path / "d1" / "lib0.o"), str(tmp_path / "d2" / "lib0.o")])


def _archive(path, name, kind=tarfile.REGTYPE, linkname=""):
    with tarfile.open(path, "w") as archive:
        info = tarfile.TarInfo(name)
        info.type, info.linkname = kind, linkname
        data = b"" if kind != tarfile.REGTYPE else b"evil"
        info.size = len(data)
        archive.addfile(info, io.BytesIO(data))


@pytest.mark.parametrize("name, kind, linkname, message", [
    ("/etc/evil", tarfile.REGTYPE, "", "points outside the archive directory"),
    ("a/../../evil", tarfile.REGTYPE, "", "points outside the archive directory"),
    ("link", tarfile.SYMTYPE, "/etc/passwd", "is a link or special file"),
    ("hard", tarfile.LNKTYPE, "other", "is a link or special file"),
    ("fifo", tarfile.FIFOTYPE, "", "is a link or special file"),
])
def test_untar_rejects_escapes(tmp_path, name, kind, linkname, message):
    path = str(tmp_path / "bad.tar")
    _archive(path, name, kind, linkname)
    with pytest.raises(KilnError, match=message):
        tar.untar(path, str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()


def test_untar_not_a_tar(tmp_path):
    (tmp_path / "x.tar").write_bytes(b"nope")
    with pytest.raises(KilnError, match="cannot read tar archive"):
        tar.untar(str(tmp_path / "x.tar"), str(tmp_path / "out"))


def test_tempdir_lifecycle():
    temp = utils.tempdir()
    path = temp.relpath("f.txt")
    with open(path, "w") as f:
        f.write("x")
    assert temp.listdir() == ["f.txt"] and os.path.dirname(path) == temp.path
    temp.remove()
    assert not os.path.exists(temp.path)


def test_tempdir_removed_when_collected():
    temp = utils.tempdir()
    path = temp.path
    del temp
    assert not os.path.exists(path)


def test_tempdir_keep_for_debug_and_custom_path(tmp_path):
    kept = utils.tempdir(keep_for_debug=True)
    path = kept.path
    del kept
    assert os.path.isdir(path)
    os.rmdir(path)
    custom = utils.tempdir(str(tmp_path / "mine"))
    del custom
    assert (tmp_path / "mine").is_dir()  # a directory the caller named is theirs to remove


def test_contrib_submodules_load_on_attribute_access():
    import kiln as tvm
    assert tvm.contrib.utils.tempdir is utils.tempdir
    with pytest.raises(AttributeError, match="has no attribute 'nothing'"):
        tvm.contrib.nothing
