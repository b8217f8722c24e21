from __future__ import annotations

import collections
import os

import pytest
import torch

from serde.archive import ArtifactIOError
from serde.bridge.bundle import dumps_tree, load_tree, loads_tree, save_tree
from serde.errors import MalformedArtifactError

P = collections.namedtuple("P", ["a", "b"])


def test_tree_roundtrip(tmp_path):
    torch.manual_seed(0)
    base = torch.randn(4, 6)
    tree = {"x": base, "view": base[:, 1::2], "ints": torch.arange(5), "flag": True, "n": 3,
            "f": float("nan"), "s": "hi", "none": None, "p": P(torch.ones(2, dtype=torch.bfloat16), -0.0)}
    save_tree(tree, tmp_path / "t.json")
    back = load_tree(tmp_path / "t.json")
    assert set(back) == set(tree)
    torch.testing.assert_close(back["x"], tree["x"], rtol=0, atol=0)
    assert back["view"].stride() == tree["view"].stride()
    assert back["view"].untyped_storage().data_ptr() == back["x"].untyped_storage().data_ptr()
    assert back["flag"] is True and back["n"] == 3 and back["s"] == "hi" and back["none"] is None
    assert back["f"] != back["f"]
    assert back["p"].b == 0.0 and str(back["p"].b) == "-0.0"


def test_tampered_payload_is_rejected():
    data = dumps_tree({"x": torch.arange(10)})
    i = data.index(b'"payloads"')
    tampered = data[: i + 20] + (b"A" if data[i + 20:i + 21] != b"A" else b"B") + data[i + 21:]
    with pytest.raises(MalformedArtifactError):
        loads_tree(tampered)


def test_not_a_bundle():
    with pytest.raises(MalformedArtifactError):
        loads_tree(b'{"format": "x"}')


def test_save_tree_uses_the_shared_atomic_writer(tmp_path):
    # normal file mode (0666 minus the umask), nothing left behind when the target is a directory
    umask = os.umask(0)
    os.umask(umask)
    save_tree({"x": torch.ones(2)}, tmp_path / "t.json")
    assert (tmp_path / "t.json").stat().st_mode & 0o777 == 0o666 & ~umask
    (tmp_path / "d").mkdir()
    with pytest.raises(ArtifactIOError, match="nothing was written there"):
        save_tree([1], tmp_path / "d")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d", "t.json"]
