"""The native program's file format and everything a loader checks before running it; no emitter, no runtime."""
