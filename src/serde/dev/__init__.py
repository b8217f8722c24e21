"""Release tooling, for a pt2serde checkout only: the schema.thrift parser and the schema checker
behind `pt2serde schema check`. Not part of the installed package (pyproject.toml leaves it out)."""
