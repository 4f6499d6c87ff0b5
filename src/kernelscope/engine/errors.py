"""The engine's one error type; the workload layer turns it into kernelscope's user-facing error."""


class EngineError(ValueError):
    """Bad input to the engine (config, weights, shapes, prompt length), said in one line."""
