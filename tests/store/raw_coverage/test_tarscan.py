"""The tar header scanner against ``tarfile`` (and GNU tar) on tars written by the tests."""

from __future__ import annotations

import io
import shutil
import subprocess
import tarfile
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vinlens.store.coverage import (
    TarExtendedHeaderTooLargeError,
    TarHeaderChecksumError,
    TarHeaderFormatError,
    TarScanError,
    TruncatedTarError,
    list_tar_member_names,
    scan_tar_headers,
)

FORMATS = {
    "ustar": tarfile.USTAR_FORMAT,
    "gnu": tarfile.GNU_FORMAT,
    "pax": tarfile.PAX_FORMAT,
}


def _add_file(tf: tarfile.TarFile, name: str, size: int) -> None:
    info = tarfile.TarInfo(name)
    info.size = size
    info.mtime = 1_700_000_000
    tf.addfile(info, io.BytesIO(bytes((i * 7) % 251 for i in range(size))))


def _add_special(tf: tarfile.TarFile, name: str, kind: bytes, linkname: str = "") -> None:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = linkname
    tf.addfile(info)


def _tarfile_members(path: Path) -> list[tarfile.TarInfo]:
    with tarfile.open(path) as tf:
        return tf.getmembers()


def _assert_matches_tarfile(path: Path) -> None:
    expected = _tarfile_members(path)
    got = scan_tar_headers(path)
    assert [m.name for m in got] == [m.name for m in expected]
    assert list_tar_member_names(path) == [m.name for m in expected]
    for ours, theirs in zip(got, expected, strict=True):
        assert ours.typeflag == ("0" if theirs.type == tarfile.AREGTYPE else theirs.type.decode())
        assert ours.is_regular == theirs.isreg(), ours.name
        assert ours.header_offset == theirs.offset, ours.name
        assert ours.data_offset == theirs.offset_data, ours.name
        if theirs.isreg():
            assert ours.size == theirs.size, ours.name
    assert list_tar_member_names(path, regular_only=True) == [m.name for m in expected if m.isreg()]


LONG_DIR = "scene_" + "d" * 120
LONG_NAME = f"{LONG_DIR}/snippet_000004." + "x" * 150 + ".rgb.jpg"


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_every_member_kind_matches_tarfile(tmp_path: Path, fmt: str) -> None:
    path = tmp_path / f"{fmt}.tar"
    with tarfile.open(path, "w", format=FORMATS[fmt]) as tf:
        _add_special(tf, "scene_000001/", tarfile.DIRTYPE)
        for size in (0, 1, 511, 512, 513, 4096, 70_000):
            _add_file(tf, f"scene_000001/snippet_{size:06d}.rgb.jpg", size)
        _add_special(tf, "scene_000001/link.json", tarfile.SYMTYPE, "snippet_000001.rgb.jpg")
        _add_special(tf, "scene_000001/hard.json", tarfile.LNKTYPE, "scene_000001/x")
        _add_special(tf, "scene_000001/fifo", tarfile.FIFOTYPE)
        # ustar stores this in prefix + name; GNU needs an 'L' header; pax a path record.
        _add_file(tf, "p" * 120 + "/scene_000002/snippet_000003.depth.png", 10)
        if fmt != "ustar":
            _add_file(tf, LONG_NAME, 300)
            _add_special(tf, "scene_000003/longlink", tarfile.SYMTYPE, "t" * 200)
            _add_file(tf, "scène_000004/snippet_ü.json", 5)
            _add_special(tf, LONG_DIR + "/" + "e" * 90 + "/", tarfile.DIRTYPE)
    _assert_matches_tarfile(path)


def test_ustar_prefix_is_joined(tmp_path: Path) -> None:
    path = tmp_path / "prefix.tar"
    name = "a" * 150 + "/scene_000001/snippet_000002.rgb.jpg"
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tf:
        _add_file(tf, name, 3)
    assert list_tar_member_names(path) == [name]


def test_many_members_across_buffers_with_mixed_sizes(tmp_path: Path) -> None:
    """Dense small members, then large ones, then dense again: exercises the read sizes."""
    path = tmp_path / "mixed.tar"
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tf:
        for i in range(3000):
            _add_file(tf, f"scene_{i % 5:06d}/snippet_{i:06d}.cls", i % 3)
        for i in range(12):
            _add_file(tf, f"big/scene_000009/snippet_{i:06d}.rgb.jpg", 300_000 + i)
        for i in range(2500):
            name = f"scene_{i % 5:06d}/snippet_{i:06d}." + ("y" * 130 if i % 97 == 0 else "png")
            _add_file(tf, name, 700)
    _assert_matches_tarfile(path)


def test_pax_global_header_and_old_v7_directory(tmp_path: Path) -> None:
    path = tmp_path / "global.tar"
    with tarfile.open(
        path, "w", format=tarfile.PAX_FORMAT, pax_headers={"comment": "made by a test"}
    ) as tf:
        _add_file(tf, "scene_000001/snippet_000001.json", 2)
        info = tarfile.TarInfo("olddir/")
        info.type = tarfile.AREGTYPE
        tf.addfile(info)
        _add_file(tf, "scene_000001/snippet_000002.json", 2)
    _assert_matches_tarfile(path)


def _write_hole_member(path: Path, fmt: int, size: int) -> None:
    """A tar whose first member has ``size`` data bytes left as a file-system hole."""
    first = tarfile.TarInfo("scene_000001/snippet_000001.huge.bin")
    first.size = size
    second = tarfile.TarInfo("scene_000001/snippet_000002.json")
    second.size = 4
    with path.open("wb") as handle:
        handle.write(first.tobuf(format=fmt))
        handle.seek(((size + 511) // 512) * 512, io.SEEK_CUR)
        handle.write(second.tobuf(format=fmt))
        handle.write(b"abcd".ljust(512, b"\0"))
        handle.write(bytes(1024))


@pytest.mark.parametrize("fmt", ["gnu", "pax"])
def test_sizes_beyond_8_gib(tmp_path: Path, fmt: str) -> None:
    """GNU base-256 and pax ``size`` records both carry sizes the octal field cannot."""
    path = tmp_path / f"huge-{fmt}.tar"
    _write_hole_member(path, FORMATS[fmt], 9 * 2**30 + 5)
    _assert_matches_tarfile(path)
    first = scan_tar_headers(path)[0]
    assert first.size == 9 * 2**30 + 5


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    fmt=st.sampled_from(sorted(FORMATS)),
    members=st.lists(
        st.tuples(
            st.text(
                alphabet=st.characters(
                    codec="utf-8", exclude_characters="\x00/", exclude_categories=["Cs"]
                ),
                min_size=1,
                max_size=40,
            ),
            st.integers(min_value=0, max_value=160),
            st.integers(min_value=0, max_value=3000),
            st.sampled_from(["file", "dir", "symlink"]),
        ),
        min_size=1,
        max_size=40,
    ),
)
def test_random_archives_match_tarfile(
    tmp_path: Path, fmt: str, members: list[tuple[str, int, int, str]]
) -> None:
    path = tmp_path / "random.tar"
    with tarfile.open(path, "w", format=FORMATS[fmt]) as tf:
        for index, (stem, pad, size, kind) in enumerate(members):
            name = f"d{index}/" + "n" * pad + stem
            try:
                if kind == "file":
                    _add_file(tf, name, size)
                elif kind == "dir":
                    _add_special(tf, name, tarfile.DIRTYPE)
                else:
                    _add_special(tf, name, tarfile.SYMTYPE, "target")
            except ValueError:
                continue  # ustar cannot store this name; tarfile refuses it before writing
    _assert_matches_tarfile(path)


@pytest.mark.skipif(shutil.which("tar") is None, reason="GNU tar not installed")
@pytest.mark.parametrize("fmt", ["gnu", "posix"])
def test_matches_gnu_tar_listing_of_its_own_archives(tmp_path: Path, fmt: str) -> None:
    root = tmp_path / "raw"
    long_dir = root / ("scene_" + "l" * 110) / "nested"
    long_dir.mkdir(parents=True)
    (long_dir / ("snippet_000001." + "z" * 120 + ".rgb.jpg")).write_bytes(b"j" * 1500)
    (root / "scene_000002").mkdir()
    for i in range(20):
        (root / "scene_000002" / f"snippet_{i:06d}.json").write_text("{}" * i)
    archive = tmp_path / f"gnu-{fmt}.tar"
    subprocess.run(
        ["tar", f"--format={fmt}", "-cf", str(archive), "-C", str(root), "."], check=True
    )
    listing = subprocess.run(
        ["tar", "-tf", str(archive)], check=True, capture_output=True, text=True
    ).stdout.splitlines()
    assert list_tar_member_names(archive) == [line.rstrip("/") for line in listing]
    _assert_matches_tarfile(archive)


# -- hostile input --------------------------------------------------------------------


def _raw_header(name: bytes, size: int, typeflag: bytes, *, signed_checksum: bool = False) -> bytes:
    """A ustar header built byte by byte (independently of the scanner and of tarfile)."""
    header = bytearray(512)
    header[0 : len(name)] = name
    header[100:108] = b"0000644\0"
    header[108:116] = b"0000000\0"
    header[116:124] = b"0000000\0"
    if size < 8**11:
        header[124:136] = b"%011o\0" % size
    else:
        header[124:136] = b"\x80" + size.to_bytes(11, "big")
    header[136:148] = b"14554737100\0"
    header[156:157] = typeflag
    header[257:265] = b"ustar\x0000"
    header[148:156] = b" " * 8
    signed = sum(b - 256 if b > 127 else b for b in header)
    checksum = signed if signed_checksum else sum(header)
    header[148:156] = b"%06o\0 " % checksum
    return bytes(header)


def _pax_record(key: str, value: str) -> bytes:
    body = f" {key}={value}\n".encode()
    length = len(body) + 1
    while len(str(length)) + len(body) != length:
        length += 1
    return str(length).encode() + body


def test_forged_pax_size_is_refused_before_allocating(tmp_path: Path) -> None:
    path = tmp_path / "forged-pax.tar"
    good = _raw_header(b"scene_000001/snippet_000001.json", 3, b"0") + b"abc".ljust(512, b"\0")
    forged = _raw_header(b"././@PaxHeader", 2**40, b"x")
    path.write_bytes(good + forged + bytes(4096))
    tracemalloc.start()
    try:
        with pytest.raises(TarExtendedHeaderTooLargeError) as caught:
            list_tar_member_names(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 * 2**20
    assert caught.value.path == str(path)
    assert caught.value.offset == 1024
    assert str(path) in str(caught.value) and "1099511627776" in str(caught.value)


def test_forged_gnu_long_name_size_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "forged-gnu.tar"
    path.write_bytes(_raw_header(b"././@LongLink", 50 * 2**20, b"L") + bytes(8192))
    with pytest.raises(TarExtendedHeaderTooLargeError, match="byte 0"):
        list_tar_member_names(path)


def test_pax_size_within_limit_but_past_end_of_file(tmp_path: Path) -> None:
    path = tmp_path / "short-pax.tar"
    path.write_bytes(_raw_header(b"././@PaxHeader", 100_000, b"x") + bytes(2048))
    with pytest.raises(TruncatedTarError, match="extended header declares 100000 bytes"):
        list_tar_member_names(path)


def test_malformed_pax_record_names_the_header(tmp_path: Path) -> None:
    payload = b"99 path=scene/x.json\n"  # length field larger than the record
    path = tmp_path / "bad-record.tar"
    path.write_bytes(
        _raw_header(b"././@PaxHeader", len(payload), b"x")
        + payload.ljust(512, b"\0")
        + _raw_header(b"x.json", 0, b"0")
        + bytes(1024)
    )
    with pytest.raises(TarHeaderFormatError, match=r"byte 0: pax record"):
        list_tar_member_names(path)


def test_pax_path_and_size_records_apply_to_the_next_member(tmp_path: Path) -> None:
    payload = _pax_record("path", "scene_000007/snippet_000001.rgb.jpg") + _pax_record(
        "size", "600"
    )
    path = tmp_path / "pax-records.tar"
    path.write_bytes(
        _raw_header(b"././@PaxHeader", len(payload), b"x")
        + payload.ljust(512, b"\0")
        + _raw_header(b"short", 0, b"0")
        + bytes(1024)  # 600 bytes of data, padded
        + _raw_header(b"scene_000007/snippet_000002.json", 0, b"0")
        + bytes(1024)
    )
    assert list_tar_member_names(path) == [
        "scene_000007/snippet_000001.rgb.jpg",
        "scene_000007/snippet_000002.json",
    ]
    _assert_matches_tarfile(path)


def test_signed_checksums_are_accepted(tmp_path: Path) -> None:
    name = "scène_000001/snippet_000001.json".encode()
    path = tmp_path / "signed.tar"
    path.write_bytes(_raw_header(name, 0, b"0", signed_checksum=True) + bytes(1024))
    assert list_tar_member_names(path) == [name.decode()]


def _make_simple_tar(path: Path, members: int = 40) -> None:
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tf:
        for i in range(members):
            _add_file(tf, f"scene_000001/snippet_{i:06d}.rgb.jpg", 1000)


@pytest.mark.parametrize(
    ("cut", "message"),
    [
        (512 * 5 + 100, "declares 1000 data bytes"),  # inside member data
        (512 * 9 + 7, "inside a 512-byte header"),  # inside a header
        (512 * 9, "without the end-of-archive marker"),  # exactly between members
    ],
)
def test_truncated_tar_is_an_error_naming_the_file(tmp_path: Path, cut: int, message: str) -> None:
    path = tmp_path / "truncated.tar"
    _make_simple_tar(path)
    data = path.read_bytes()
    path.write_bytes(data[:cut])
    with pytest.raises(TruncatedTarError, match=message) as caught:
        list_tar_member_names(path)
    assert str(path) in str(caught.value)


def test_empty_file_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "empty.tar"
    path.write_bytes(b"")
    with pytest.raises(TruncatedTarError, match="empty"):
        list_tar_member_names(path)


def test_corrupt_header_reports_checksum_and_offset(tmp_path: Path) -> None:
    path = tmp_path / "corrupt.tar"
    _make_simple_tar(path)
    data = bytearray(path.read_bytes())
    data[3 * 1536 + 20] ^= 0x01  # a name byte of the fourth header
    path.write_bytes(bytes(data))
    with pytest.raises(TarHeaderChecksumError) as caught:
        list_tar_member_names(path)
    assert caught.value.offset == 3 * 1536
    assert f"{path}: at byte {3 * 1536}" in str(caught.value)


def test_garbled_size_field_reports_the_checksum_not_the_symptom(tmp_path: Path) -> None:
    path = tmp_path / "garbled.tar"
    _make_simple_tar(path)
    data = bytearray(path.read_bytes())
    data[2 * 1536 + 124 : 2 * 1536 + 136] = b"77777777777\0"  # 8 GiB, would run past EOF
    path.write_bytes(bytes(data))
    with pytest.raises(TarHeaderChecksumError, match=f"at byte {2 * 1536}"):
        list_tar_member_names(path)


def test_not_a_tar_file(tmp_path: Path) -> None:
    path = tmp_path / "notes.tar"
    path.write_text("these are not tar headers\n" * 100)
    with pytest.raises(TarScanError, match=r"notes\.tar: at byte 0: .*not a tar archive"):
        list_tar_member_names(path)


def test_missing_file_and_directory(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        list_tar_member_names(tmp_path / "absent.tar")
    with pytest.raises(IsADirectoryError, match="is a directory"):
        list_tar_member_names(tmp_path)


def test_scanner_only_reads(tmp_path: Path) -> None:
    path = tmp_path / "ro.tar"
    _make_simple_tar(path)
    before = path.read_bytes(), path.stat().st_mtime_ns
    path.chmod(0o444)
    assert len(list_tar_member_names(path)) == 40
    assert (path.read_bytes(), path.stat().st_mtime_ns) == before


def test_file_objects_are_scanned_and_named_in_errors(tmp_path: Path) -> None:
    path = tmp_path / "stream.tar"
    _make_simple_tar(path, members=30)
    expected = [m.name for m in _tarfile_members(path)]
    with path.open("rb") as handle:
        assert list_tar_member_names(handle) == expected
    data = path.read_bytes()
    assert list_tar_member_names(io.BytesIO(data), name="in-memory.tar") == expected
    with pytest.raises(TruncatedTarError, match=r"^in-memory\.tar: at byte"):
        list_tar_member_names(io.BytesIO(data[:5000]), name="in-memory.tar")


def test_a_fifo_or_directory_named_like_a_tar_is_refused_without_blocking(tmp_path: Path) -> None:
    import os

    from vinlens.store.format import DirectoryInsteadOfFileError, SpecialFileError

    fifo = tmp_path / "x.tar"
    os.mkfifo(fifo)
    with pytest.raises(SpecialFileError, match=r"x\.tar: is a FIFO"):
        list_tar_member_names(fifo)
    (tmp_path / "d.tar").mkdir()
    with pytest.raises(DirectoryInsteadOfFileError, match=r"d\.tar: is a directory"):
        scan_tar_headers(tmp_path / "d.tar")
