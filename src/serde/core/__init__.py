"""The schema core: Structs, wire codec, versions, expression trees and their parser, argument walks,
name checks and limits. Plain data and pure functions; never imports torch (an import contract in
pyproject.toml and tests/serde/test_layers.py hold it to that)."""
