"""The schema core: Structs, wire codec, versions, expression trees and their parser, argument walks,
the schema-level checks (:mod:`serde.core.checks`), their caps (:mod:`serde.core.limits`) and errors
(:mod:`serde.core.errors`), and the dtype tables (:mod:`serde.core.dtypes`). Plain data and pure
functions; never imports torch (an import contract in pyproject.toml and tests/test_layers.py
hold it to that)."""
