"""Schema upgraders: one module per step (``v1_to_v2.py``), each a pure function on decoded JSON."""
