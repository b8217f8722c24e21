"""Native emitter: flattens canonical programs into an instruction program, plus a reference runtime."""
