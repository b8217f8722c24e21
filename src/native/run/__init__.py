"""Running native programs: the Python runtime, the C++ runtime's binding, input/output files, profiles, ``--compare``."""
