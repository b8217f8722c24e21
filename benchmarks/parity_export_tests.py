"""Parity run: pytorch's own export tests through our pair, beside torch's.

    python benchmarks/parity_export_tests.py PATH/TO/pytorch/test/export
    python benchmarks/parity_export_tests.py DIR --modes torch,serde -k colon --timeout 60
    python benchmarks/parity_export_tests.py DIR --jobs 3 --json /tmp/parity.json

``DIR`` is the ``test/export`` directory of a pytorch checkout (its ``test_export.py`` and the
``testing.py`` beside it; nothing of it is shipped here). The classes ``TestExport`` and
``TestDynamismExpression`` run three ways, the way pytorch's own ``test_serdes.py`` runs them:

* ``plain``: as written;
* ``torch``: every program that a test exports through ``test_export.export`` goes through
  ``torch.export.save`` into an ``io.BytesIO`` and back through ``torch.export.load`` before the
  test sees it;
* ``serde``: the same through ``serde.save`` and ``serde.load`` (``--debug-info`` saves with
  ``debug_info=True``, which keeps stack traces and the other path-bearing metadata). The tensor
  subclasses of ``torch.testing._internal`` that the tests use are registered first
  (``serde.testing.register_torch_test_subclasses``), as a user registers the classes they trust:
  torch's pair unpickles them by name, ours never imports a class a file names.
  ``--no-register-subclasses`` leaves them unregistered, to count those refusals.

The round-tripping ways rename each test with the suffix pytorch's non-strict serdes run uses
(``_serdes_nonstrict``), so a test that asks whether it runs under serdes gets the same answer
from both pairs. ``expectedFailure`` marks in the test file are ignored: the raw outcome counts.
Each way runs in its own pytest process (``nice``, no xdist, a per-test time limit by
``SIGALRM``). Prints the passes per way and every test that passes with torch's pair and fails
with ours, by class, with the first line of its error; ``--json`` writes all outcomes.
``--deadline MINUTES`` interrupts the ways still running after that time (pytest then writes what
it ran) and compares the tests both pairs ran: on a shared machine a whole run can take hours.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from unittest import mock

CLASSES = ("TestDynamismExpression", "TestExport")
MODES = ("plain", "torch", "serde")
SUFFIX = {"plain": "", "torch": "_serdes_nonstrict", "serde": "_serdes_nonstrict"}
PREFIX = {"plain": "Plain", "torch": "TorchPair", "serde": "SerdePair"}

_REPO = Path(__file__).resolve().parent.parent


# --------------------------------------------------------------------------------------------
# Inside the pytest process: the generated test module calls build_classes.


def _round_trip(export_fn, mode, debug_info, *args, **kwargs):
    ep = export_fn(*args, **kwargs)
    buf = io.BytesIO()
    if mode == "torch":
        import torch

        torch.export.save(ep, buf)
        buf.seek(0)
        return torch.export.load(buf)
    import serde

    serde.save(ep, buf, debug_info=debug_info)
    buf.seek(0)
    return serde.load(buf)


def _patched(fn, module, export_fn):
    @functools.wraps(fn)
    def run(*args, **kwargs):
        # The tests call the module-level name ``export`` (pytorch keeps it patchable on
        # purpose); calls spelled ``torch.export.export`` stay unpatched, as in test_serdes.
        with mock.patch.object(module, "export", export_fn):
            return fn(*args, **kwargs)

    return run


def build_classes(
    mode: str, export_dir: str, debug_info: bool = False, register_subclasses: bool = True
) -> dict:
    """The mode's copies of the test classes, keyed by their names."""
    sys.path.insert(0, export_dir)
    if mode == "serde" and register_subclasses:
        from serde.testing import register_torch_test_subclasses

        register_torch_test_subclasses()
    import test_export  # the checkout's, from export_dir

    original = test_export.export
    export_fn = (
        original
        if mode == "plain"
        else functools.partial(_round_trip, original, mode, debug_info)
    )
    out = {}
    for cls_name in CLASSES:
        cls = getattr(test_export, cls_name)
        new = type(f"{PREFIX[mode]}{cls_name}", cls.__bases__, {})
        new.__qualname__ = new.__name__
        for name in dir(cls):
            attr = getattr(cls, name)
            if name.startswith("test_") and callable(attr):
                wrapped = attr if mode == "plain" else _patched(attr, test_export, export_fn)
                new_name = name + SUFFIX[mode]
                wrapped.__name__ = new_name
                setattr(new, new_name, wrapped)
            elif not hasattr(new, name):
                setattr(new, name, attr)
        # Class-level skips (unittest.skipIf on the class) carry over.
        for flag in ("__unittest_skip__", "__unittest_skip_why__"):
            if hasattr(cls, flag):
                setattr(new, flag, getattr(cls, flag))
        out[new.__name__] = new
    return out


class _Timeout(BaseException):
    """Raised by the alarm; a BaseException so that a test's own ``except Exception`` keeps
    no hung test alive."""


@contextlib.contextmanager
def time_limit(seconds: float):
    def _alarm(signum, frame):
        raise _Timeout(f"test exceeded {seconds:g} s")

    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


_MODULE = '''\
import importlib.util, os, sys
import pytest
_spec = importlib.util.spec_from_file_location("parity_harness", {harness!r})
_h = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_h)
globals().update(_h.build_classes(
    {mode!r}, {export_dir!r}, debug_info={debug_info!r}, register_subclasses={register!r}
))

@pytest.fixture(autouse=True)
def _parity_time_limit():
    with _h.time_limit({timeout!r}):
        yield
'''


# --------------------------------------------------------------------------------------------
# The driver.


def _run_mode(mode, args, workdir: Path) -> subprocess.Popen:
    test_file = workdir / f"test_parity_{mode}.py"
    test_file.write_text(
        _MODULE.format(
            harness=str(Path(__file__).resolve()),
            mode=mode,
            export_dir=str(Path(args.export_dir).resolve()),
            debug_info=args.debug_info,
            register=not args.no_register_subclasses,
            timeout=float(args.timeout),
        )
    )
    cmd = [
        "nice", "-n", str(args.nice), sys.executable, "-m", "pytest", str(test_file),
        "-q", "-p", "no:xdist", "-p", "no:cacheprovider", "-p", "no:randomly",
        "--rootdir", str(workdir), "--junitxml", str(workdir / f"{mode}.xml"),
    ]
    if args.k:
        cmd += ["-k", args.k]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(_REPO / "src"), str(_REPO)] + [p for p in [env.get("PYTHONPATH")] if p]
    )
    log = open(workdir / f"{mode}.log", "w")
    return subprocess.Popen(cmd, cwd=workdir, env=env, stdout=log, stderr=subprocess.STDOUT,
                            preexec_fn=_interruptible)


def _outcomes(xml_path: Path, mode: str) -> dict:
    """test id (class without the mode's prefix, test without its suffix) -> (outcome, message)."""
    out = {}
    if not xml_path.exists():
        return out
    for case in ET.parse(xml_path).getroot().iter("testcase"):
        cls = case.get("classname", "").rsplit(".", 1)[-1].removeprefix(PREFIX[mode])
        name = case.get("name", "")
        if SUFFIX[mode]:
            name = name.removesuffix(SUFFIX[mode])
        outcome, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            el = case.find(tag)
            if el is not None:
                outcome = "skipped" if tag == "skipped" else "failed"
                text = (el.get("message") or el.text or "").strip()
                message = text.splitlines()[0][:300] if text else ""
                break
        out[f"{cls}::{name}"] = (outcome, message)
    return out


def compare(t: dict, s: dict) -> tuple[dict, list]:
    """Tests passing with torch's pair and not with ours (by class, with our first error line), and
    the ids passing with ours only. A test one pair did not run (a run cut short by ``--deadline``)
    is no difference."""
    only_torch: dict = {}
    only_serde: list = []
    for tid in sorted(t.keys() & s.keys()):
        if t[tid][0] == "passed" and s[tid][0] != "passed":
            cls, name = tid.split("::")
            only_torch.setdefault(cls, []).append({"test": name, "error": s[tid][1]})
        if s[tid][0] == "passed" and t[tid][0] != "passed":
            only_serde.append(tid)
    return only_torch, only_serde


def _past(stop_at: float | None) -> bool:
    return stop_at is not None and time.monotonic() >= stop_at


def _interruptible() -> None:
    """In a way's process before it starts: SIGINT back to its default. A harness started in the
    background (``&`` in a script, a pytest-xdist worker) inherits SIGINT ignored, and Python then
    never raises KeyboardInterrupt, so --deadline could not stop the way."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _wait_any(running: list, stop_at: float | None) -> None:
    """Wait until one of ``running``'s (mode, process) pairs ends and remove it. Past ``stop_at``,
    interrupt every running process: pytest answers SIGINT by ending the session and writing the
    junit XML of the tests it ran, which a harder signal would lose."""
    interrupted = False
    while True:
        for i, (_, proc) in enumerate(running):
            if proc.poll() is not None:
                running.pop(i)
                return
        if not interrupted and _past(stop_at):
            for _, proc in running:
                proc.send_signal(signal.SIGINT)
            interrupted = True
        time.sleep(0.2)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("export_dir", help="a pytorch checkout's test/export directory")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("-k", default=None, help="pytest -k expression")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per test")
    ap.add_argument("--jobs", type=int, default=1, help="modes run at once")
    ap.add_argument("--nice", type=int, default=10)
    ap.add_argument("--debug-info", action="store_true", help="serde.save(debug_info=True)")
    ap.add_argument(
        "--no-register-subclasses",
        action="store_true",
        help="leave torch's test tensor subclasses unregistered (serde mode)",
    )
    ap.add_argument(
        "--deadline",
        type=float,
        default=None,
        help="minutes: then interrupt the running modes (pytest still writes what ran) and start no"
        " more; the report compares the tests both pairs ran",
    )
    ap.add_argument("--json", default=None, help="write every outcome here")
    ap.add_argument("--keep", default=None, help="keep the generated files and logs here")
    args = ap.parse_args(argv)
    if not (Path(args.export_dir) / "test_export.py").is_file():
        ap.error(f"{args.export_dir} has no test_export.py: give a checkout's test/export")
    modes = [m for m in args.modes.split(",") if m]
    unknown = sorted(set(modes) - set(MODES))
    if unknown:
        ap.error(f"unknown modes {unknown}; choose from {list(MODES)}")

    ctx = (
        contextlib.nullcontext(args.keep)
        if args.keep
        else tempfile.TemporaryDirectory(prefix="parity-")
    )
    with ctx as wd:
        workdir = Path(wd)
        workdir.mkdir(parents=True, exist_ok=True)
        stop_at = time.monotonic() + args.deadline * 60 if args.deadline else None
        pending, running = list(modes), []
        while pending or running:
            while pending and len(running) < max(1, args.jobs) and not _past(stop_at):
                mode = pending.pop(0)
                running.append((mode, _run_mode(mode, args, workdir)))
            if not running:
                break  # past the deadline: the modes still pending are not run
            _wait_any(running, stop_at)
        results = {m: _outcomes(workdir / f"{m}.xml", m) for m in modes}

    report = {"counts": {}, "torch_pass_serde_fail": {}, "serde_pass_torch_fail": []}
    for m in modes:
        vals = [o for o, _ in results[m].values()]
        report["counts"][m] = {
            k: vals.count(k) for k in ("passed", "failed", "skipped")
        } | {"total": len(vals)}
    if "torch" in results and "serde" in results:
        report["torch_pass_serde_fail"], report["serde_pass_torch_fail"] = compare(
            results["torch"], results["serde"]
        )
    print(json.dumps(report["counts"]))
    for cls, rows in report["torch_pass_serde_fail"].items():
        print(f"\n{cls}: {len(rows)} pass with torch's pair and fail with ours")
        for row in rows:
            print(f"  {row['test']}: {row['error']}")
    if report["serde_pass_torch_fail"]:
        print(f"\npass with ours and fail with torch's pair: {report['serde_pass_torch_fail']}")
    if args.json:
        report["outcomes"] = {m: results[m] for m in modes}
        Path(args.json).write_text(json.dumps(report, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
