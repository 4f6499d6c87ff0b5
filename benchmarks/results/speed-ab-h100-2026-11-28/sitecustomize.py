import atexit
import functools
import importlib
import os
import sys
import time

if os.environ.get("KS_TIMING") and "kernelscope" in " ".join(sys.argv) or sys.argv[0].endswith("kernelscope/__main__.py"):
    pass
def _install():
    T0 = time.perf_counter()
    spans = []
    targets = [("kernelscope.load.rundir", "read_run"), ("kernelscope.analyze.report_tables", "report_tables"),
               ("kernelscope.report.render", "_report_text"), ("kernelscope.report.figure_jobs", "FigureDrawing.collect"),
               ("kernelscope.report.figure_jobs", "FigureDrawing.submit"), ("kernelscope.report.render", "render_report"),
               ("kernelscope.analyze.report_tables", "own_device_projection"), ("kernelscope.analyze.report_tables", "roofline_tables"),
               ("kernelscope.pipeline", "rerender")] + [tuple(a.split(":")) for a in os.environ.get("KS_TIMING_MORE", "").split() if a]
    for modname, attr in targets:
        mod = importlib.import_module(modname)
        owner, name = mod, attr
        if "." in attr:
            cls, name = attr.split(".")
            owner = getattr(mod, cls)
        fn = getattr(owner, name)
        def make(fn, label):
            @functools.wraps(fn)
            def timed(*a, **k):
                t = time.perf_counter()
                try:
                    return fn(*a, **k)
                finally:
                    spans.append((label, t - T0, time.perf_counter() - t))
            return timed
        setattr(owner, name, make(fn, f"{modname.split('.')[-1]}.{attr}"))
    def report():
        if os.getpid() != PID:
            return
        for label, start, dur in sorted(spans, key=lambda s: s[1]):
            print(f"{start:6.2f} +{dur:5.2f}  {label}", file=sys.stderr)
        print(f"exit at {time.perf_counter()-T0:.2f}", file=sys.stderr)
    atexit.register(report)
PID = os.getpid()
if os.environ.get("KS_TIMING") == "1":
    os.environ["KS_TIMING"] = "child"  # helpers do not time
    _install()

def _variants():
    if os.environ.get("KS_NOFIG") == "1":
        import kernelscope.commands.imports as IM
        import kernelscope.report.figure_jobs as FJ
        FJ.default_helpers = lambda: 0
        def nodraw(jobs, formats):
            for j in jobs:
                yield j.key, None
        FJ._draw_set = nodraw
        FJ.warm_up_helper = lambda: None
        IM._warm_up_helpers = lambda args: None
    if os.environ.get("KS_HELPERS"):
        import kernelscope.report.figure_jobs as FJ
        FJ.MAX_HELPERS = int(os.environ["KS_HELPERS"])
if os.environ.get("KS_VARIANT") == "1":
    os.environ["KS_VARIANT"] = "child"
    _variants()
