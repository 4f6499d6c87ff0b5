"""Side by side: vl-convert (Vega-Lite to PNG, Rust) and matplotlib (Agg), the same two charts drawn to PNG in one
process: a log-log scatter of 400 points in 6 colour groups with sized points and a few text labels (a roofline's
shape), and a grid of 8 histogram panels. Medians of 10 drawings after 2 warm-ups, and each library's first call.

    pip install --target /tmp/vlc/site vl-convert-python==1.9.0.post1
    python renderer_trial.py /tmp/vlc/site
"""

import io
import random
import statistics
import sys
import time

sys.path.insert(0, sys.argv[1])  # where vl-convert-python was installed (not a kernelscope dependency)

random.seed(1)
POINTS = [{"ai": 10 ** random.uniform(-1, 3), "perf": 10 ** random.uniform(9, 14), "group": random.choice("abcdef"),
           "dur": random.uniform(1, 50)} for _ in range(400)]


def vega(vlc):
    scatter = {"$schema": "https://vega.github.io/schema/vega-lite/v5.json", "width": 900, "height": 600,
               "title": "Roofline", "data": {"values": POINTS}, "layer": [
                   {"mark": {"type": "point", "filled": True, "opacity": 0.6},
                    "encoding": {"x": {"field": "ai", "type": "quantitative", "scale": {"type": "log"}},
                                 "y": {"field": "perf", "type": "quantitative", "scale": {"type": "log"}},
                                 "color": {"field": "group"}, "size": {"field": "dur", "type": "quantitative"}}},
                   {"mark": {"type": "text", "dy": -8}, "transform": [{"filter": "datum.dur > 45"}],
                    "encoding": {"x": {"field": "ai", "type": "quantitative"},
                                 "y": {"field": "perf", "type": "quantitative"}, "text": {"field": "group"}}}]}
    grid = {"$schema": "https://vega.github.io/schema/vega-lite/v5.json", "data": {"values": POINTS * 2},
            "transform": [{"calculate": "datum.group + (random() < 0.5 ? '1' : '2')", "as": "panel"}],
            "facet": {"field": "panel"}, "columns": 4,
            "spec": {"width": 200, "height": 150, "mark": "bar",
                     "encoding": {"x": {"field": "dur", "bin": {"maxbins": 30}}, "y": {"aggregate": "count"}}}}
    return (lambda: vlc.vegalite_to_png(scatter, scale=1.5)), (lambda: vlc.vegalite_to_png(grid, scale=1.5))


def mpl():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def scatter():
        fig, ax = plt.subplots(figsize=(6, 4))
        for g in "abcdef":
            rows = [p for p in POINTS if p["group"] == g]
            ax.scatter([p["ai"] for p in rows], [p["perf"] for p in rows], s=[p["dur"] * 3 for p in rows],
                       alpha=0.6, label=g)
        for p in POINTS:
            if p["dur"] > 45:
                ax.annotate(p["group"], (p["ai"], p["perf"]), textcoords="offset points", xytext=(0, 6))
        ax.set_xscale("log"), ax.set_yscale("log"), ax.set_title("Roofline"), ax.legend()
        out = io.BytesIO()
        fig.savefig(out, format="png", dpi=150)
        plt.close(fig)
        return out.getvalue()

    def grid():
        fig, axes = plt.subplots(2, 4, figsize=(11, 5))
        for i, ax in enumerate(axes.flat):
            ax.hist([p["dur"] for p in POINTS[i::2]], bins=30)
            ax.set_title(f"panel {i}")
        out = io.BytesIO()
        fig.savefig(out, format="png", dpi=150)
        plt.close(fig)
        return out.getvalue()
    return scatter, grid


def timed(name, make):
    start = time.perf_counter()
    scatter, grid = make()
    scatter()
    first = time.perf_counter() - start
    for _ in range(2):
        scatter(), grid()
    wall = {"scatter": [], "grid": []}
    cpu = {"scatter": [], "grid": []}  # the process's CPU time, every thread's
    for _ in range(10):
        for key, draw in (("scatter", scatter), ("grid", grid)):
            t, c = time.perf_counter(), time.process_time()
            draw()
            wall[key].append(time.perf_counter() - t)
            cpu[key].append(time.process_time() - c)
    print(f"{name}: first scatter (with the library's start) {first * 1000:.0f} ms; medians of 10: "
          + ", ".join(f"{k} {statistics.median(wall[k]) * 1000:.0f} ms ({statistics.median(cpu[k]) * 1000:.0f} ms CPU)"
                      for k in wall))


if __name__ == "__main__":
    import vl_convert

    timed("vl-convert " + getattr(vl_convert, "__version__", "1.9.0"), lambda: vega(vl_convert))
    import matplotlib

    timed("matplotlib " + matplotlib.__version__, mpl)
