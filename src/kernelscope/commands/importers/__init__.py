"""How `kernelscope import` turns each kind of recording into a run (commands/imports.py picks one)."""
