from kernelscope.cli import entry

# Guarded: helper processes (trace loading) import the main module again.
if __name__ == "__main__":
    entry()
