"""Canonical form of pt2serde programs: canonicalize, render (show) and diff. No torch imports."""
