"""The test kit: compare two ExportedPrograms, or save/load one and compare; draw random programs.

:mod:`~serde.testing.compare` (structure), :mod:`~serde.testing.outputs` (running both),
:mod:`~serde.testing.roundtrip`, :mod:`~serde.testing.subclasses`, and the hypothesis strategies of
:mod:`~serde.testing.strategies` (hypothesis is a test dependency: those names load on first use).
:mod:`serde.testing.zoo` holds the shared zoo of models (import it by name). Example::

    from serde.testing import assert_roundtrip
    ep = torch.export.export(model, args)
    assert_roundtrip(ep)

Property tests over random exported programs (needs hypothesis); draw specs and export in the
test, so hypothesis does not count the export as slow input generation::

    from hypothesis import given, settings
    from serde.testing import program_specs, export_spec

    @settings(deadline=None)
    @given(program_specs())
    def test_roundtrip(spec):
        assert_roundtrip(export_spec(spec)[0])
"""

from serde.core.lazy import lazy_exports

from . import compare, errors, roundtrip, subclasses
from .compare import *  # noqa: F403
from .errors import *  # noqa: F403
from .roundtrip import *  # noqa: F403
from .subclasses import *  # noqa: F403

_STRATEGIES = dict.fromkeys(("exported_programs", "program_specs", "build_program", "export_spec",
                             "schema_structs"), "strategies")

__all__ = [*compare.__all__, *errors.__all__, *roundtrip.__all__, *subclasses.__all__, *_STRATEGIES]
__getattr__, __dir__ = lazy_exports(__name__, _STRATEGIES)
