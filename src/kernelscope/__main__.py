from kernelscope.cli import main

# Guarded: helper processes (trace loading) import the main module again.
if __name__ == "__main__":
    raise SystemExit(main())
