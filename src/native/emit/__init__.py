"""The emitter: canonical Structs and weights to a native program (``native.emit.emitter.emit``)."""
