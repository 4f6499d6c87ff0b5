"""Reports and closing lines of real public traces (tests/data/public, README there): words that follow the trace
(one kernel, no phase markers, where steps came from, in each language), how to record what the trace lacks, and
source lines' modules and kernels as the file's own times give them."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

PUBLIC = Path(__file__).resolve().parents[1] / "data" / "public"


@pytest.mark.slow
def test_report_words_follow_the_trace_one_kernel_and_no_phase_markers(tmp_path):
    """A public trace with a single kernel reads "1 kernel"; one whose run has no phase markers (run.json says
    where phases came from: "none") says so in the methodology, in each language, instead of "(here: none)"."""
    from kernelscope.cli import main

    single = PUBLIC / "hta" / "data__triton_example__triton_example.json.gz"
    with gzip.open(single, "rt") as f:
        assert sum(e.get("cat") == "kernel" for e in json.load(f)["traceEvents"]) == 1
    out = tmp_path / "single"
    assert main(["-q", "import", str(single), "--out", str(out), "--lang", "en,zh"]) == 0
    overview = (out / "report" / "report.md").read_text().split("## Setup")[0]
    assert "1 kernel," in overview and "1 kernels" not in overview

    unmarked = PUBLIC / "hta" / "data__cupti_profiler__benchmark_result_924719_1679055439_trace.json.gz"
    out = tmp_path / "unmarked"
    assert main(["-q", "import", str(unmarked), "--out", str(out), "--lang", "en,zh"]) == 0
    assert json.loads((out / "run.json").read_text())["attribution"]["phase"]["source"] == "none"
    en = (out / "report" / "report.md").read_text()
    zh = (out / "report" / "report.zh.md").read_text()
    assert "this trace has none" in en and "here: none" not in en
    assert "没有任何此类标记" in zh and "none" not in zh.split("## 附录：方法说明")[1].split("\n- 时延")[0]


@pytest.mark.slow
def test_the_chinese_report_names_where_steps_came_from_in_chinese(tmp_path):
    """The source of a foreign trace's steps (run.json) is one of kernelscope's names; the Chinese report says it in
    Chinese wherever it names it (the steps' introduction and the attribution table), not in English."""
    from kernelscope.cli import main

    trace = PUBLIC / "tracelens" / "traces__torch_compile_triton__trace.json.gz"
    out = tmp_path / "run"
    assert main(["-q", "import", str(trace), "--out", str(out), "--lang", "en,zh"]) == 0
    source = json.loads((out / "run.json").read_text())["attribution"]["step"]["source"]
    assert source == "embedding lookups and compiled-graph calls"
    zh = (out / "report" / "report.zh.md").read_text()
    assert "各步来自嵌入查找与编译图调用" in zh and "| 步 | 嵌入查找与编译图调用 |" in zh and source not in zh
    assert source in (out / "report" / "report.md").read_text()


def test_the_closing_lines_say_how_to_record_phases(tmp_path, capsys):
    """An imported trace with no phase or step marker: the closing lines say how to record one; one with no CPU
    activity at all (read from the file) is told to record the CPU side first."""
    from kernelscope.cli import main

    gpu_only = PUBLIC / "tracelens" / "mi210__gpu_only_trace__gpu_only_trace.json.gz"
    with gzip.open(gpu_only, "rt") as f:
        assert not any(e.get("cat") == "cpu_op" for e in json.load(f)["traceEvents"])
    assert main(["import", str(gpu_only), "--out", str(tmp_path / "gpu"), "--no-report"]) == 0
    assert "record the CPU side too" in capsys.readouterr().out
    unmarked = PUBLIC / "hta" / "data__cupti_profiler__benchmark_result_924719_1679055439_trace.json.gz"
    assert main(["import", str(unmarked), "--out", str(tmp_path / "cpu"), "--no-report"]) == 0
    assert "phases: the trace marks none; record with `prof.step()`" in capsys.readouterr().out
    # A trace that marks its steps gets no such line.
    marked = PUBLIC / "tracelens" / "inference__sglang_decode__sglang_Qwen3-8B_decode.json.gz"
    assert main(["import", str(marked), "--out", str(tmp_path / "marked"), "--no-report"]) == 0
    assert "phases:" not in capsys.readouterr().out


def test_a_trace_whose_device_was_not_recorded_says_so(tmp_path, capsys):
    """A real trace with its device events taken out (what torch.profiler writes without ProfilerActivity.CUDA):
    its CPU ops stand in, and the closing lines, run.json and the report in each language say how many calls
    started GPU work that the trace does not show. A trace of range-profiler activity instead of kernels is not
    told so."""
    import re

    from kernelscope.cli import main

    source = PUBLIC / "tracelens" / "traces__h100__gaunernst_bert-small-uncased__1016001.json.gz"
    with gzip.open(source, "rt") as f:
        document = json.load(f)
    device = {"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation"}  # every event the device side writes
    document["traceEvents"] = [e for e in document["traceEvents"] if str(e.get("cat", "")).lower() not in device]
    calls = sum(1 for e in document["traceEvents"] if e.get("cat") in ("cuda_runtime", "cuda_driver")
                and re.search(r"LaunchKernel|GraphLaunch|Memcpy|Memset", e.get("name", "")))
    assert calls > 0
    stripped = tmp_path / "no_device.json"
    stripped.write_text(json.dumps(document))
    out = tmp_path / "run"
    assert main(["import", str(stripped), "--out", str(out), "--lang", "en,zh"]) == 0
    closing = capsys.readouterr().out
    assert f"holds {calls:,} calls that start GPU work but no GPU activity" in closing
    assert "CPU ops stand in" in closing
    assert json.loads((out / "run.json").read_text())["trace"]["files"][0]["unrecorded_device_calls"] == calls
    assert f"holds {calls:,} calls that start GPU work" in (out / "report" / "report.md").read_text()
    assert f"含 {calls:,} 次启动 GPU 工作的调用" in (out / "report" / "report.zh.md").read_text()

    profiler = PUBLIC / "hta" / "data__cupti_profiler__benchmark_result_924719_1679055439_trace.json.gz"
    assert main(["import", str(profiler), "--out", str(tmp_path / "ranges"), "--no-report"]) == 0
    assert "no GPU activity" not in capsys.readouterr().out
    assert "unrecorded_device_calls" not in json.loads((tmp_path / "ranges" / "run.json").read_text())["trace"]["files"][0]


def test_a_source_lines_module_and_kernel_are_its_largest_with_ties_to_the_first_name(tmp_path):
    """A vLLM trace whose source lines spread their time evenly over the layers' modules: each line's module and top
    kernel are those holding most of its time, a tie going to the first name, the same on every call (the group-by
    order had picked one of the tied layers)."""
    from kernelscope.analyze.costs.kernel_costs import with_costs_and_names
    from kernelscope.analyze.costs.naming import kernel_labels
    from kernelscope.analyze.source_lines import source_line_table
    from kernelscope.cli import main
    from kernelscope.load import rundir

    trace = PUBLIC / "tracelens" / "traces__b200__eager_trace.json.gz"
    assert main(["-q", "import", str(trace), "--out", str(tmp_path / "run"), "--no-report"]) == 0
    kernels = with_costs_and_names(rundir.read_run(tmp_path / "run", ops=False)).kernels
    labels = kernel_labels(kernels)
    label_of = dict(zip(labels["name"].to_list(), labels["label"].to_list(), strict=True))
    # Plain Python: per source line, the time of each module and of each kernel label.
    time_of: dict[str, dict[str, dict[str, int]]] = {}
    for line, module, name, dur in kernels.select("source_line", "module", "name", "dur_ns").iter_rows():
        if line is None:
            continue
        entry = time_of.setdefault(line, {"module": {}, "label": {}})
        entry["module"][module] = entry["module"].get(module, 0) + dur
        entry["label"][label_of[name]] = entry["label"].get(label_of[name], 0) + dur

    def largest(times: dict) -> str:
        return min(times, key=lambda key: (-times[key], key is None, key or ""))

    tied = [line for line, e in time_of.items()
            if sorted(e["module"].values())[-2:][0] == max(e["module"].values()) and len(e["module"]) > 1]
    assert tied  # the case this trace holds
    for _ in range(5):
        table = source_line_table(kernels, labels)
        for line, module, top_kernel in table.select("source_line", "module", "top_kernel").iter_rows():
            assert module == largest(time_of[line]["module"]), line
            assert top_kernel == largest(time_of[line]["label"]), line
