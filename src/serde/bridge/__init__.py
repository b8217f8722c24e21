"""The torch bridge: ExportedProgram <-> schema Structs (program, graph, arguments, values,
signature, weights, custom objects, operators), the program-level checks (:mod:`serde.bridge.checks`)
and their errors (:mod:`serde.bridge.errors`). Built on :mod:`serde.core` and :mod:`serde.archive`."""
