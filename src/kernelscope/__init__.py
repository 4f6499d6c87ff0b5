"""kernelscope: where an LLM inference spends its time, kernel by kernel."""

__version__ = "0.1.0"
