"""Read a Kineto (torch.profiler / Chrome trace) JSON file into columnar tables (contracts.trace.TraceTables).

`document.py` opens the file (plain or gzip) and finds the event array and the fields around it; `chunks.py`
splits the array between top-level events and decodes the pieces (in a helper process too, for big traces);
`events.py` decodes a chunk into events (`event_records.py`: the structs and categories) and turns them into the
kernels, launches and ops tables (`event_tables.py`).
"""

from kernelscope.load.kineto.reader import load_kineto

__all__ = ["load_kineto"]
