"""Pictures read from a sandbox root (bus/services/pictures.py)."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

import filetype
import pytest

from bus.core.errors import BadInput
from bus.core.models import FileRef
from bus.services import pictures
from bus.services.pictures import MAX_PICTURES, Picture, read_pictures, safe_name, store_picture
from tests.support.pictures import JPEG, encoded, png_bytes

# The classic 1x1 transparent GIF.
GIF = (
    b"GIF89a\x01\x00\x01\x00\x80\x00\x00\x00\x00\x00\xff\xff\xff!\xf9\x04\x01\x00\x00"
    b"\x00\x00,\x00\x00\x00\x00\x01\x00\x01\x00\x00\x02\x02D\x01\x00;"
)


def webp_bytes() -> bytes:
    """A real RIFF/WEBP picture."""
    return encoded("WEBP")


SAMPLES = {
    "a.png": (png_bytes(), "image/png"),
    "b.jpg": (JPEG, "image/jpeg"),
    "c.gif": (GIF, "image/gif"),
    "d.webp": (webp_bytes(), "image/webp"),
}


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "sandbox"
    r.mkdir()
    for name, (data, _) in SAMPLES.items():
        (r / name).write_bytes(data)
    return r


def _code(ei: pytest.ExceptionInfo[BaseException]) -> str:
    return getattr(ei.value, "code", "")


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_filetype_recognises_fixture_bytes(name: str) -> None:
    data, mime = SAMPLES[name]
    kind = filetype.guess(data)
    assert kind is not None and kind.mime == mime


def test_reads_all_four_types(root: Path) -> None:
    pics = read_pictures(sorted(SAMPLES), root)
    assert [p.name for p in pics] == sorted(SAMPLES)
    for pic in pics:
        data, mime = SAMPLES[pic.name]
        assert pic.content_type == mime
        assert pic.data == data and pic.size == len(data)
        assert pic.sha256 == hashlib.sha256(data).hexdigest()


def test_ref_is_a_file_ref(root: Path) -> None:
    (pic,) = read_pictures(["a.png"], root)
    ref = pic.ref()
    assert isinstance(ref, FileRef)
    assert (ref.name, ref.content_type, ref.size, ref.sha256) == (
        "a.png",
        "image/png",
        pic.size,
        pic.sha256,
    )


def test_no_paths_is_no_pictures(root: Path) -> None:
    assert read_pictures([], root) == []


def test_type_comes_from_bytes_not_name(root: Path) -> None:
    (root / "really-a-jpeg.png").write_bytes(JPEG)
    (pic,) = read_pictures(["really-a-jpeg.png"], root)
    assert pic.content_type == "image/jpeg"


def test_absolute_path_inside_root(root: Path) -> None:
    (pic,) = read_pictures([str(root / "c.gif")], root)
    assert pic.content_type == "image/gif"


def test_subdirectory_and_inner_symlink_allowed(root: Path) -> None:
    (root / "sub").mkdir()
    (root / "sub" / "e.png").write_bytes(png_bytes())
    (root / "link.png").symlink_to(root / "sub" / "e.png")
    pics = read_pictures(["sub/e.png", "link.png", "sub/../a.png"], root)
    assert [p.name for p in pics] == ["e.png", "link.png", "a.png"]


def test_root_given_through_a_symlink(tmp_path: Path, root: Path) -> None:
    alias = tmp_path / "alias"
    alias.symlink_to(root)
    (pic,) = read_pictures([str(alias / "a.png")], alias)
    assert pic.content_type == "image/png"
    (pic,) = read_pictures([str(alias / "a.png")], root)
    assert pic.content_type == "image/png"


@pytest.mark.parametrize(
    "content",
    [
        b"hello, this is text\n",
        b"",
        b"GIF is a file format, says this text file",
        b"\x89PNx not quite",
        b"RIFF\x00\x00\x00\x00WAVEfmt ",
        b"%PDF-1.7\n",
        b"BM" + b"\x00" * 64,  # a BMP: a picture, but not one of the four
    ],
)
def test_not_a_picture(root: Path, content: bytes) -> None:
    (root / "x.png").write_bytes(content)
    with pytest.raises(BadInput) as ei:
        read_pictures(["x.png"], root)
    assert _code(ei) == "not_a_picture"
    assert "x.png" in str(ei.value)


def test_symlink_escaping_root(tmp_path: Path, root: Path) -> None:
    outside = tmp_path / "secret.png"
    outside.write_bytes(png_bytes())
    (root / "innocent.png").symlink_to(outside)
    with pytest.raises(BadInput) as ei:
        read_pictures(["innocent.png"], root)
    assert _code(ei) == "picture_outside_root"
    assert "innocent.png" in str(ei.value)


def test_symlinked_directory_escaping_root(tmp_path: Path, root: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "p.png").write_bytes(png_bytes())
    (root / "dir").symlink_to(elsewhere)
    with pytest.raises(BadInput) as ei:
        read_pictures(["dir/p.png"], root)
    assert _code(ei) == "picture_outside_root"


@pytest.mark.parametrize(
    "path",
    [
        "../secret.png",
        "sub/../../secret.png",
        "../sandbox-sibling/a.png",
    ],
)
def test_dotdot_escape(tmp_path: Path, root: Path, path: str) -> None:
    (tmp_path / "secret.png").write_bytes(png_bytes())
    (tmp_path / "sandbox-sibling").mkdir()
    (tmp_path / "sandbox-sibling" / "a.png").write_bytes(png_bytes())
    (root / "sub").mkdir()
    with pytest.raises(BadInput) as ei:
        read_pictures([path], root)
    assert _code(ei) == "picture_outside_root"


def test_absolute_path_outside(tmp_path: Path, root: Path) -> None:
    outside = tmp_path / "secret.png"
    outside.write_bytes(png_bytes())
    for path in (str(outside), "/etc/passwd", str(root) + "-evil/a.png"):
        with pytest.raises(BadInput) as ei:
            read_pictures([path], root)
        assert _code(ei) == "picture_outside_root", path


def test_missing_file(root: Path) -> None:
    with pytest.raises(BadInput) as ei:
        read_pictures(["nope.png"], root)
    assert _code(ei) == "picture_not_found"
    assert "nope.png" in str(ei.value)


def test_dangling_symlink_inside_root(root: Path) -> None:
    (root / "dangling.png").symlink_to(root / "gone.png")
    with pytest.raises(BadInput) as ei:
        read_pictures(["dangling.png"], root)
    assert _code(ei) == "picture_not_found"


@pytest.mark.parametrize("path", [".", "sub", "sub/", ""])
def test_directory_or_empty_path(root: Path, path: str) -> None:
    (root / "sub").mkdir()
    with pytest.raises(BadInput) as ei:
        read_pictures([path], root)
    assert _code(ei) in {"picture_not_a_file", "picture_path_invalid"}


def test_fifo_refused_without_hanging(root: Path) -> None:
    os.mkfifo(root / "pipe.png")
    with pytest.raises(BadInput) as ei:
        read_pictures(["pipe.png"], root)
    assert _code(ei) == "picture_not_a_file"


def test_nul_in_path(root: Path) -> None:
    with pytest.raises(BadInput) as ei:
        read_pictures(["a.png\x00.txt"], root)
    assert _code(ei) == "picture_path_invalid"


def test_too_large(root: Path) -> None:
    size = len(SAMPLES["a.png"][0])
    assert read_pictures(["a.png"], root, max_bytes=size)[0].size == size
    with pytest.raises(BadInput) as ei:
        read_pictures(["a.png"], root, max_bytes=size - 1)
    assert _code(ei) == "picture_too_large"
    assert "a.png" in str(ei.value)


def test_default_bound_is_five_mib(root: Path) -> None:
    assert pictures.MAX_PICTURE_BYTES == 5 * 1024 * 1024
    big = png_bytes() + b"\x00" * pictures.MAX_PICTURE_BYTES
    (root / "big.png").write_bytes(big)
    with pytest.raises(BadInput) as ei:
        read_pictures(["big.png"], root)
    assert _code(ei) == "picture_too_large"


def test_too_many(root: Path) -> None:
    assert MAX_PICTURES == 4
    paths = [*sorted(SAMPLES), "a.png"]
    with pytest.raises(BadInput) as ei:
        read_pictures(paths, root)
    assert _code(ei) == "too_many_pictures"
    assert len(read_pictures(paths[:4], root)) == 4


def test_one_bad_picture_refuses_all(root: Path) -> None:
    (root / "x.png").write_text("not a picture")
    with pytest.raises(BadInput) as ei:
        read_pictures(["a.png", "b.jpg", "x.png"], root)
    assert _code(ei) == "not_a_picture"


def test_missing_root(tmp_path: Path) -> None:
    with pytest.raises(BadInput) as ei:
        read_pictures(["a.png"], tmp_path / "absent")
    assert _code(ei) == "picture_root_missing"


def test_single_string_is_refused(root: Path) -> None:
    with pytest.raises(BadInput):
        read_pictures("a.png", root)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "raw, safe",
    [
        ("photo.png", "photo.png"),
        (".hidden.png", "hidden.png"),
        ("..png", "png"),
        ("...", "picture"),
        ("a/b.png", "a_b.png"),
        ("a\\b.png", "a_b.png"),
        ("bad\nname\x00.png", "bad_name_.png"),
        ("  spaced.png ", "spaced.png"),
        ("", "picture"),
    ],
)
def test_safe_name(raw: str, safe: str) -> None:
    assert safe_name(raw) == safe


def test_safe_name_bounds_length_and_keeps_extension() -> None:
    name = safe_name("é" * 300 + ".png")
    assert name.endswith(".png")
    assert len(name.encode()) <= 200


def _pic(name: str, data: bytes) -> Picture:
    return Picture(
        name=name,
        content_type="image/png",
        data=data,
        size=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
    )


def test_store_writes_private_files(tmp_path: Path) -> None:
    d = tmp_path / "files" / "thr_x"
    pic = _pic("a.png", png_bytes())
    path = store_picture(d, pic)
    assert path == d / "a.png"
    assert path.read_bytes() == pic.data
    assert stat.S_IMODE(os.stat(d).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert [p.name for p in d.iterdir()] == ["a.png"]  # no temp file left behind


def test_store_tightens_existing_dir(tmp_path: Path) -> None:
    d = tmp_path / "files"
    d.mkdir(mode=0o755)
    os.chmod(d, 0o755)
    store_picture(d, _pic("a.png", png_bytes()))
    assert stat.S_IMODE(os.stat(d).st_mode) == 0o700


def test_store_collisions(tmp_path: Path) -> None:
    d = tmp_path / "files"
    first = store_picture(d, _pic("a.png", b"one"))
    same = store_picture(d, _pic("a.png", b"one"))
    second = store_picture(d, _pic("a.png", b"two"))
    third = store_picture(d, _pic("a.png", b"three"))
    again = store_picture(d, _pic("a.png", b"two"))
    noext = store_picture(d, _pic("README", b"x"))
    noext2 = store_picture(d, _pic("README", b"y"))
    assert [p.name for p in (first, same, second, third, again)] == [
        "a.png",
        "a.png",
        "a-2.png",
        "a-3.png",
        "a-2.png",
    ]
    assert (noext.name, noext2.name) == ("README", "README-2")
    assert first.read_bytes() == b"one" and third.read_bytes() == b"three"


def test_store_sanitises_name(tmp_path: Path) -> None:
    d = tmp_path / "files"
    path = store_picture(d, _pic("../../evil.png", b"x"))
    assert path.parent == d
    assert path.name == "_.._evil.png"
    path = store_picture(d, _pic(".bashrc", b"x"))
    assert path == d / "bashrc"


def test_store_does_not_follow_planted_symlink(tmp_path: Path) -> None:
    d = tmp_path / "files"
    d.mkdir()
    target = tmp_path / "victim"
    target.write_bytes(b"keep me")
    (d / "a.png").symlink_to(target)
    path = store_picture(d, _pic("a.png", b"new"))
    assert path == d / "a-2.png"
    assert target.read_bytes() == b"keep me"


def test_read_then_store_round_trip(tmp_path: Path, root: Path) -> None:
    d = tmp_path / "store"
    paths = [store_picture(d, p) for p in read_pictures(sorted(SAMPLES), root)]
    for path in paths:
        assert path.read_bytes() == SAMPLES[path.name][0]
