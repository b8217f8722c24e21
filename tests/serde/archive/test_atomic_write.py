"""Atomic saves (serde.archive.write_atomic, used by serde.save and the native writer): a kill -9,
an exception or a KeyboardInterrupt leaves the previous file or nothing, and no temporary file.

The kill tests run a real subprocess that rewrites the members of a real ~50 MB artifact through
write_archive (the same bytes serde.save writes; it needs no torch, so each kill costs little).
"""

from __future__ import annotations

import hashlib
import io
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import serde
from serde.archive import ArtifactIOError, payload_name, read_archive, write_archive, write_atomic
from serde.fileio import atomic

TORCH = "2.13.0"

# The writer goes through the real write path, 1 MiB at a time with a short pause after each, so
# that a write lasts long enough (a quarter second) for the kills to land inside it even when the
# machine is so busy that the parent is not scheduled for tens of milliseconds.
_REWRITER = """
import os, sys, time
from serde import archive
from serde.fileio import atomic
atomic._USE_O_TMPFILE = sys.argv[3] == "1"
_writev = os.writev
def _paced(fd, buffers):  # at most 1 MiB per call: the writer must carry on after short writes
    n = _writev(fd, [memoryview(buffers[0]).cast("B")[:1 << 20]])
    time.sleep(0.005)
    return n
os.writev = _paced
src = archive.read_archive(sys.argv[1])
members = {n: src.member(n) for n in src.names if n != archive.MANIFEST}
print("ready", flush=True)
archive.write_archive(sys.argv[2], members, schema_version=src.schema_version,
                      torch_version=src.manifest.torch_version)
"""


def _temps(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


@pytest.fixture(scope="module")
def two_artifacts(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Two real ~50 MB artifacts of the same program with different weights."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3600, 3600), torch.nn.ReLU())
    ep = torch.export.export(model, (torch.randn(2, 3600),))
    d = tmp_path_factory.mktemp("refs")
    a, b = d / "a.pt2s", d / "b.pt2s"
    serde.save(ep, a)
    with torch.no_grad():
        ep.state_dict["0.weight"].add_(1.0)
    serde.save(ep, b)
    assert a.stat().st_size > 50e6 and a.read_bytes() != b.read_bytes()
    return a, b


def _rewrite(src: Path, dest: Path, tmpfile: bool) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen([sys.executable, "-c", _REWRITER, str(src), str(dest), "1" if tmpfile else "0"],
                            stdout=subprocess.PIPE, env=env, text=True)
    assert proc.stdout.readline() == "ready\n"
    return proc


def _wait_until_writing(proc: subprocess.Popen, directory: Path) -> None:
    """Until the writer holds a file in ``directory`` open (the unnamed O_TMPFILE file shows as
    ``<directory>/#<inode> (deleted)``) or has exited."""
    fds = Path(f"/proc/{proc.pid}/fd")
    while proc.poll() is None:
        links = []
        for fd in list(fds.iterdir()) if fds.exists() else []:
            try:
                links.append(os.readlink(fd))
            except OSError:  # closed meanwhile
                pass
        if any(link.startswith(f"{directory}/") for link in links):
            return
        time.sleep(0.0005)


def _kill_repeatedly(two: tuple[Path, Path], directory: Path, kills: int, tmpfile: bool, reach: float) -> None:
    """Kill writers at random points from ``0`` to ``reach`` times the length of a whole write,
    counted from the moment the temporary file is open."""
    refs = [p.read_bytes() for p in two]
    target = directory / "model.pt2s"
    proc = _rewrite(two[0], target, tmpfile)
    _wait_until_writing(proc, directory)
    t0 = time.monotonic()  # how long one write takes here, to spread the kills over it
    proc.wait()
    span = time.monotonic() - t0
    assert target.read_bytes() == refs[0] and _temps(directory) == []
    rng = random.Random(0)
    interrupted, current = 0, 0  # current: which reference the target holds
    for k in range(kills):
        new = 1 - current  # alternate, so the previous and the new file always differ
        proc = _rewrite(two[new], target, tmpfile)
        _wait_until_writing(proc, directory)
        time.sleep(rng.uniform(0, reach * span))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        got = target.read_bytes()
        assert got in (refs[current], refs[new]), f"kill {k}: the target is neither the old nor the new file"
        if got == refs[current]:
            interrupted += 1
        current = refs.index(got)
        if tmpfile:  # the unnamed file dies with the process
            assert _temps(directory) == [], f"kill {k} (of {kills}, {span=:.3f}s) left a temporary file"
    # A later save removes what the fallback's killed writers left (their pids are dead).
    _rewrite(two[1 - current], target, tmpfile).wait()
    assert _temps(directory) == []
    assert sorted(p.name for p in directory.iterdir()) == ["model.pt2s"]
    serde.load(target)  # the survivor is a complete, loadable artifact
    assert interrupted, "no kill landed during a write: the test did not test anything"


@pytest.mark.parametrize("tmpfile", [True, False], ids=["o_tmpfile", "named_temp"])
def test_kill_during_save_leaves_old_or_new_file_and_no_temp(two_artifacts, tmp_path: Path, tmpfile: bool) -> None:
    _kill_repeatedly(two_artifacts, tmp_path, kills=3, tmpfile=tmpfile, reach=0.5)


@pytest.mark.slow
@pytest.mark.parametrize("tmpfile", [True, False], ids=["o_tmpfile", "named_temp"])
def test_forty_kills_during_save(two_artifacts, tmp_path: Path, tmpfile: bool) -> None:
    _kill_repeatedly(two_artifacts, tmp_path, kills=40, tmpfile=tmpfile, reach=1.5)


def _members() -> dict[str, bytes]:
    data = bytes(range(256)) * 40
    return {"program.json": b"{}", "weights.json": b"{}", payload_name(hashlib.sha256(data).hexdigest()): data}


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@pytest.fixture(params=[True, False], ids=["o_tmpfile", "named_temp"])
def tmpfile(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    monkeypatch.setattr(atomic, "_USE_O_TMPFILE", request.param)
    return request.param


def test_completed_save_replaces_keeps_mode_and_leaves_no_temp(tmp_path: Path, tmpfile: bool) -> None:
    target = tmp_path / "model.pt2s"
    target.write_bytes(b"old")
    os.chmod(target, 0o640)
    write_archive(target, _members(), schema_version=(1, 0), torch_version="new")
    assert read_archive(target).manifest.torch_version == "new"
    assert target.stat().st_mode & 0o777 == 0o640  # the replaced file's mode is kept
    fresh = tmp_path / "fresh.pt2s"
    write_archive(fresh, _members(), schema_version=(1, 0), torch_version=TORCH)
    assert fresh.stat().st_mode & 0o777 == 0o666 & ~_umask()  # a normal file, not 0600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fresh.pt2s", "model.pt2s"]


@pytest.mark.parametrize("error", [KeyboardInterrupt, RuntimeError])
def test_exception_mid_write_leaves_old_file_and_no_temp(tmp_path: Path, tmpfile: bool, error: type) -> None:
    target = tmp_path / "prog.bin"
    target.write_bytes(b"previous")

    def chunks():
        yield b"x" * 100_000
        raise error("interrupted")

    with pytest.raises(error):
        write_atomic(target, chunks())
    assert target.read_bytes() == b"previous"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["prog.bin"]


def test_failed_save_removes_its_temp_file(tmp_path: Path, tmpfile: bool) -> None:
    target = tmp_path / "taken"
    target.mkdir()
    (target / "keep").write_text("x")
    with pytest.raises(ArtifactIOError, match="nothing was written there"):
        write_archive(target, _members(), schema_version=(1, 0), torch_version=TORCH)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]
    assert (target / "keep").read_text() == "x"
    with pytest.raises(ArtifactIOError, match="cannot create a temporary file"):
        write_archive(tmp_path / "no" / "dir.pt2s", _members(), schema_version=(1, 0), torch_version=TORCH)


def test_stale_temps_of_dead_writers_are_removed_and_live_ones_kept(tmp_path: Path) -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    dead_pid = int(dead.stdout)
    with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) as live:
        try:
            names = {
                f".model.pt2s.{dead_pid}.0123abcd.tmp": False,   # a killed writer's: removed
                f".model.pt2s.{live.pid}.0123abcd.tmp": True,    # a running writer's: kept
                f".model.pt2s.{os.getpid()}.0123abcd.tmp": True,  # another thread of this process
                f".other.pt2s.{dead_pid}.0123abcd.tmp": True,    # another target's
                f".model.pt2s.{dead_pid}.notours.tmp": True,     # not our pattern
            }
            for n in names:
                (tmp_path / n).write_bytes(b"partial")
            write_archive(tmp_path / "model.pt2s", _members(), schema_version=(1, 0), torch_version=TORCH)
            assert _temps(tmp_path) == sorted(n for n, keep in names.items() if keep)
        finally:
            live.kill()


def test_a_file_is_swept_once_per_process_where_it_is_written_unnamed(tmp_path: Path, tmpfile: bool) -> None:
    """Listing the directory on every save costs a small save 1.5%: where the new file is written
    unnamed, a leftover needs a kill within microseconds, and the first save to a path in a
    process sweeps it; elsewhere (a kill at any point of a write leaves one) every save does."""
    from serde.core.memo import forget_all

    dead = int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                              text=True, check=True).stdout)
    target = tmp_path / "model.pt2s"
    stale = tmp_path / f".model.pt2s.{dead}.0123abcd.tmp"
    stale.write_bytes(b"partial")
    write_archive(target, _members(), schema_version=(1, 0), torch_version=TORCH)
    assert _temps(tmp_path) == []
    stale.write_bytes(b"partial")
    write_archive(target, _members(), schema_version=(1, 0), torch_version=TORCH)
    assert _temps(tmp_path) == ([stale.name] if tmpfile else [])
    forget_all()  # as a new process would
    write_archive(target, _members(), schema_version=(1, 0), torch_version=TORCH)
    assert _temps(tmp_path) == []


def test_temporary_names_are_unique_and_carry_the_writers_pid() -> None:
    names = [atomic._temp_name("m.pt2s") for _ in range(1000)]
    assert len(set(names)) == 1000
    assert all(n.startswith(f".m.pt2s.{os.getpid()}.") for n in names)
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # a forked child names its files with its own pid
        try:
            os.write(write, atomic._temp_name("m.pt2s").encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as f:
        got = f.read()
    os.waitpid(child, 0)
    assert got.startswith(f".m.pt2s.{child}.") and got not in names


def test_short_writes_to_a_file_write_everything(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  tmpfile: bool) -> None:
    """The OS may write fewer bytes than asked: what is left of a chunk goes in the next call."""
    members = {**_members(), payload_name("ab" * 32): b""}
    expected = io.BytesIO()
    write_archive(expected, members, schema_version=(1, 0), torch_version=TORCH)
    real, calls = os.writev, []

    def trickle(fd: int, buffers: list) -> int:
        calls.append(len(buffers))
        head = memoryview(buffers[0]).cast("B")
        return real(fd, [head[:7], *(buffers[1:2] if len(head) <= 7 else [])][:2])

    monkeypatch.setattr(os, "writev", trickle)
    target = tmp_path / "a.pt2s"
    write_archive(target, members, schema_version=(1, 0), torch_version=TORCH)
    assert target.read_bytes() == expected.getvalue()
    assert len(calls) > 100


# ---------------------------------------------------------------- file objects: short writes


class _Trickle(io.RawIOBase):
    """A raw stream that takes at most ``step`` bytes per write() and says how many it took."""

    def __init__(self, step: int) -> None:
        self.step, self.data = step, bytearray()

    def writable(self) -> bool:
        return True

    def write(self, b) -> int:
        taken = bytes(memoryview(b).cast("B")[:self.step])
        self.data += taken
        return len(taken)


class _WouldBlock(_Trickle):
    """A non-blocking raw stream that accepts one write, then would block (returns None)."""

    def write(self, b) -> int | None:
        return None if self.data else super().write(b)


def test_short_writes_to_raw_streams_write_everything() -> None:
    expected = io.BytesIO()
    write_archive(expected, _members(), schema_version=(1, 0), torch_version=TORCH)
    raw = _Trickle(1000)
    write_archive(raw, _members(), schema_version=(1, 0), torch_version=TORCH)
    assert bytes(raw.data) == expected.getvalue()
    read_archive(bytes(raw.data))


def test_short_writes_of_a_real_program(tmp_path: Path) -> None:
    ep = torch.export.export(torch.nn.Linear(40, 30), (torch.randn(2, 40),))
    raw = _Trickle(1000)
    serde.save(ep, raw)
    serde.save(ep, tmp_path / "ref.pt2s")
    assert bytes(raw.data) == (tmp_path / "ref.pt2s").read_bytes()
    assert len(raw.data) > 10_000  # many short writes were needed


class _Recording(io.RawIOBase):
    """A raw stream that takes every write whole and records its size."""

    def __init__(self) -> None:
        self.sizes: list[int] = []
        self.data = bytearray()

    def writable(self) -> bool:
        return True

    def write(self, b) -> int:
        view = memoryview(b).cast("B")
        self.sizes.append(len(view))
        self.data += view
        return len(view)


def test_a_stream_gets_a_write_per_run_of_small_chunks(tmp_path: Path) -> None:
    """Headers and small members go to a file object together; a big member is written alone,
    and a long run of small ones is cut into writes of about _JOIN_BYTES."""
    datas = [b"\x01" * (atomic._ALONE_BYTES + 5), *(bytes([i]) * 40_000 for i in range(40))]  # 1.6 MB of small ones
    members = {**_members(), **{payload_name(hashlib.sha256(d).hexdigest()): d for d in datas}}
    raw = _Recording()
    write_archive(raw, members, schema_version=(1, 0), torch_version=TORCH)
    target = tmp_path / "a.pt2s"
    write_archive(target, members, schema_version=(1, 0), torch_version=TORCH)
    assert bytes(raw.data) == target.read_bytes()
    assert raw.sizes.count(atomic._ALONE_BYTES + 5) == 1  # the big member, alone
    assert len(raw.sizes) <= 8  # not two writes per member (about 90)
    assert max(raw.sizes) < atomic._JOIN_BYTES + 50_000  # runs are cut near the cap
    read_archive(bytes(raw.data))


def test_a_stream_that_would_block_is_an_error() -> None:
    with pytest.raises(ArtifactIOError, match=r"write\(\) returned None, which a non-blocking stream does"):
        write_archive(_WouldBlock(1000), _members(), schema_version=(1, 0), torch_version=TORCH)
