"""Structure: phases, steps, generations and layers, and where nothing marks them, what the kernel sequence's regularities say (repeats, layers, passes, prefill or decode, training phases)."""
