"""The torch bridge: ExportedProgram <-> schema Structs (program, graph, arguments, values,
signature, weights, custom objects, operators). Built on :mod:`serde.core` and :mod:`serde.archive`."""
