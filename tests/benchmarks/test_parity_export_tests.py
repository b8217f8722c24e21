"""The parity harness (benchmarks/parity_export_tests.py): the export each way hands a test, and how
pytest's report becomes per-test outcomes. A stand-in test_export module of our own plays pytorch's."""

from __future__ import annotations

import importlib.util
import sys
import textwrap
import unittest
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit


def _load_harness():
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "parity_export_tests.py"
    spec = importlib.util.spec_from_file_location("pt2serde_parity_harness", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


harness = _load_harness()

# Records what each test saw, so the test below can tell a round-tripped program from the original:
# torch's pair keeps the node's stack trace, ours drops it unless debug_info=True.
_STAND_IN = '''
import unittest
import torch
from torch.export import export

SEEN = []


class TestDynamismExpression(unittest.TestCase):
    def test_nothing(self):
        pass


class TestExport(unittest.TestCase):
    def test_relu(self):
        class M(torch.nn.Module):
            def forward(self, x):
                return torch.relu(x) + 1

        x = torch.randn(3)
        ep = export(M(), (x,))
        SEEN.append((self._testMethodName, ep))
        self.assertTrue(torch.equal(ep.module()(x), M()(x)))

    def test_fails_everywhere(self):
        self.fail("plainly")
'''


@pytest.fixture
def export_dir(tmp_path):
    (tmp_path / "test_export.py").write_text(textwrap.dedent(_STAND_IN))
    yield str(tmp_path)
    sys.modules.pop("test_export", None)
    while str(tmp_path) in sys.path:
        sys.path.remove(str(tmp_path))


def _run(classes, name):
    suite = unittest.defaultTestLoader.loadTestsFromTestCase(classes[name])
    return unittest.TextTestRunner(stream=open("/dev/null", "w"), verbosity=0).run(suite)


@pytest.mark.torch
@pytest.mark.parametrize("mode", ["plain", "torch", "serde"])
def test_each_way_hands_the_test_its_program(export_dir, mode):
    classes = harness.build_classes(mode, export_dir)
    assert set(classes) == {f"{harness.PREFIX[mode]}TestDynamismExpression",
                            f"{harness.PREFIX[mode]}TestExport"}
    result = _run(classes, f"{harness.PREFIX[mode]}TestExport")
    assert result.testsRun == 2 and len(result.failures) == 1
    assert result.failures[0][0]._testMethodName == "test_fails_everywhere" + harness.SUFFIX[mode]

    seen = sys.modules["test_export"].SEEN
    (name, ep), = seen
    assert name == "test_relu" + harness.SUFFIX[mode]
    traces = [n.meta.get("stack_trace") for n in ep.graph.nodes if n.op == "call_function"]
    # A program that went through serde.load carries no stack trace; the original and torch's
    # loaded copy do.
    assert all(traces) == (mode != "serde"), traces


def test_the_report_maps_back_to_the_original_names(tmp_path):
    xml = tmp_path / "serde.xml"
    xml.write_text(textwrap.dedent("""\
        <testsuites><testsuite>
          <testcase classname="test_parity_serde.SerdePairTestExport" name="test_a_serdes_nonstrict"/>
          <testcase classname="test_parity_serde.SerdePairTestExport" name="test_b_serdes_nonstrict">
            <failure message="AssertionError: 'add' != 'add_klxrf'&#xA;more">trace</failure></testcase>
          <testcase classname="test_parity_serde.SerdePairTestDynamismExpression"
                    name="test_c_serdes_nonstrict"><skipped message="gpu"/></testcase>
        </testsuite></testsuites>"""))
    assert harness._outcomes(xml, "serde") == {
        "TestExport::test_a": ("passed", ""),
        "TestExport::test_b": ("failed", "AssertionError: 'add' != 'add_klxrf'"),
        "TestDynamismExpression::test_c": ("skipped", "gpu"),
    }


def test_a_test_only_one_pair_ran_is_no_difference():
    torch_way = {"TestExport::test_a": ("passed", ""), "TestExport::test_b": ("passed", ""),
                 "TestExport::test_c": ("failed", "x")}
    serde_way = {"TestExport::test_a": ("failed", "AssertionError: y"), "TestExport::test_c": ("passed", "")}
    only_torch, only_serde = harness.compare(torch_way, serde_way)
    assert only_torch == {"TestExport": [{"test": "test_a", "error": "AssertionError: y"}]}
    assert only_serde == ["TestExport::test_c"]


def test_the_deadline_interrupts_so_that_pytest_can_still_report(tmp_path):
    import signal
    import subprocess
    import time

    out = tmp_path / "report"
    # Stands in for a pytest session: on SIGINT it ends and writes its report, as pytest writes
    # its junit XML on KeyboardInterrupt.
    child = ("import pathlib, sys, time\n"
             "try:\n    time.sleep(600)\n"
             "except KeyboardInterrupt:\n    pathlib.Path(sys.argv[1]).write_text('interrupted')\n")
    # as the harness starts its ways, and from a parent that ignores SIGINT (an xdist worker, a
    # background job), which the child would inherit
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        proc = subprocess.Popen([sys.executable, "-c", child, str(out)], preexec_fn=harness._interruptible)
    finally:
        signal.signal(signal.SIGINT, previous)
    running = [("torch", proc)]
    start = time.monotonic()
    harness._wait_any(running, start + 3.0)
    assert running == [] and proc.returncode == 0
    assert out.read_text() == "interrupted"
    assert time.monotonic() - start < 60
