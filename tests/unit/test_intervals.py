import numpy as np

from kernelscope.analyze.intervals import NestedIntervals


def build(rows):
    thread, start, dur = (np.array(c) for c in zip(*rows, strict=True))
    return NestedIntervals.build(thread, start, dur, span=100_000)


# thread 0: A[0,100) ⊃ B[10,50) ⊃ C[20,30); D[60,70) ⊂ A; E[100,120) after A; thread 1: F[0,1000)
ROWS = [(0, 0, 100), (0, 10, 40), (0, 20, 10), (0, 60, 10), (0, 100, 20), (1, 0, 1000)]


def test_depth_and_parents():
    index = build(ROWS)
    depth = np.empty(len(ROWS), dtype=int)
    depth[index.rows] = index.depth
    assert depth.tolist() == [0, 1, 2, 1, 0, 0]


def test_innermost_and_outermost_queries():
    index = build(ROWS)
    threads = np.array([0, 0, 0, 0, 0, 0, 1, 1, 2])
    times = np.array([5, 25, 35, 65, 100, 130, 500, 2000, 5])
    assert index.innermost(threads, times).tolist() == [0, 2, 1, 3, 4, -1, 5, -1, -1]
    assert index.outermost(threads, times).tolist() == [0, 0, 0, 0, 4, -1, 5, -1, -1]


def test_half_open_siblings_and_unknown_thread():
    index = build([(0, 0, 10), (0, 10, 10)])
    assert index.innermost(np.array([0, 0, -1]), np.array([9, 10, 5])).tolist() == [0, 1, -1]


def test_zero_length_interval_nests_inside_parent():
    index = build([(0, 0, 100), (0, 50, 0)])
    assert index.innermost(np.array([0]), np.array([50])).tolist() == [1]
    assert index.has_children().tolist() == [True, False]


def test_child_time_sums_direct_children_only():
    index = build(ROWS[:5])
    dur = np.array([r[2] for r in ROWS[:5]])
    assert index.child_time(dur).tolist() == [50.0, 10.0, 0.0, 0.0, 0.0]


def test_empty_index_answers_minus_one():
    index = NestedIntervals.build(np.array([], int), np.array([], int), np.array([], int), span=10)
    assert index.innermost(np.array([0, 0]), np.array([1, 2])).tolist() == [-1, -1]
