"""The GPU's board energy counter and power, read through NVML (the nvidia-ml-py package), on a sampling thread.

Each sample asks NVML for two field values in one call: the total energy counter (mJ since the driver loaded) and
the instantaneous board power (mW), each with the time the driver took it. ctypes releases the GIL during the call,
so the thread costs the generation little; every sample is stamped with `time.perf_counter_ns()` around the call and
NVML's own timestamps are carried over to that clock, so the counter's update moments are known.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from kernelscope.errors import UserError

# NVML field ids (nvml.h): total energy in mJ, instantaneous board power in mW.
FIELD_TOTAL_ENERGY = 83
FIELD_POWER_INSTANT = 186
SAMPLE_INTERVAL_S = 0.002  # the counter updates every few ms on Hopper; finer sampling only costs CPU


@dataclass
class PowerSamples:
    """Columns of the samples (one entry each per sample), on the perf_counter clock in ns. energy_mj and power_mw
    are None where NVML refused that field; *_at_ns is when the driver took the value (None: not reported)."""

    host_ns: list[int] = field(default_factory=list)
    energy_mj: list[int | None] = field(default_factory=list)
    energy_at_ns: list[int | None] = field(default_factory=list)
    power_mw: list[int | None] = field(default_factory=list)
    power_at_ns: list[int | None] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.host_ns)


class EnergyMeter:
    """NVML opened for one CUDA device (found by its UUID, so CUDA_VISIBLE_DEVICES' renumbering does not matter)."""

    def __init__(self, cuda_index: int) -> None:
        try:
            import pynvml
        except ImportError:
            raise UserError("--energy: NVML is not available (install nvidia-ml-py: pip install nvidia-ml-py)") from None
        self._nvml = pynvml
        try:
            pynvml.nvmlInit()
            self._handle = self._find(cuda_index)
            first = self.read()
        except pynvml.NVMLError as exc:
            raise UserError(f"--energy: NVML cannot read cuda:{cuda_index}'s energy counter ({exc})") from None
        if first[1] is None:
            raise UserError(f"--energy: cuda:{cuda_index} has no readable energy counter (NVML field "
                            f"{FIELD_TOTAL_ENERGY})")
        # NVML stamps values in µs of the Unix clock; this offset carries them to perf_counter's.
        self._unix_to_perf_ns = time.perf_counter_ns() - time.time_ns()

    def _find(self, cuda_index: int) -> Any:
        """NVML's handle of CUDA's device: by its UUID; by index where no device list renumbers them."""
        import torch

        uuid = str(torch.cuda.get_device_properties(cuda_index).uuid)
        try:
            return self._nvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else f"GPU-{uuid}")
        except self._nvml.NVMLError:
            if os.environ.get("CUDA_VISIBLE_DEVICES"):
                raise
            return self._nvml.nvmlDeviceGetHandleByIndex(cuda_index)

    def read(self) -> tuple[int, int | None, int | None, int | None, int | None]:
        """(host ns, energy mJ, energy taken at, power mW, power taken at); host ns is the call's midpoint."""
        before = time.perf_counter_ns()
        values = self._nvml.nvmlDeviceGetFieldValues(self._handle, [FIELD_TOTAL_ENERGY, FIELD_POWER_INSTANT])
        after = time.perf_counter_ns()
        energy, energy_at = self._value(values[0])
        power, power_at = self._value(values[1])
        return (before + after) // 2, energy, energy_at, power, power_at

    def _value(self, value: Any) -> tuple[int | None, int | None]:
        if value.nvmlReturn != 0:
            return None, None
        number = {0: value.value.dVal, 1: value.value.uiVal, 2: value.value.ulVal, 3: value.value.ullVal,
                  4: value.value.sllVal, 5: value.value.siVal, 6: value.value.usVal}.get(value.valueType)
        if number is None:
            return None, None
        stamp = int(value.timestamp)
        at = stamp * 1000 + getattr(self, "_unix_to_perf_ns", 0) if stamp > 0 else None
        return int(number), at

    def close(self) -> None:
        with contextlib.suppress(self._nvml.NVMLError):  # already shut down
            self._nvml.nvmlShutdown()


class PowerSampler:
    """Samples the meter on a daemon thread from `start()` to `stop()`; `stop()` returns every sample."""

    def __init__(self, meter: EnergyMeter, interval_s: float = SAMPLE_INTERVAL_S) -> None:
        self._meter, self._interval = meter, interval_s
        self._samples = PowerSamples()
        self._done = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="power-sampler", daemon=True)

    @property
    def interval_s(self) -> float:
        return self._interval

    def start(self) -> None:
        self._take()  # a sample before the first window opens
        self._thread.start()

    def _take(self) -> None:
        host, energy, energy_at, power, power_at = self._meter.read()
        s = self._samples
        s.host_ns.append(host)
        s.energy_mj.append(energy)
        s.energy_at_ns.append(energy_at)
        s.power_mw.append(power)
        s.power_at_ns.append(power_at)

    def _run(self) -> None:
        try:
            while not self._done.wait(self._interval):
                self._take()
        except BaseException as exc:  # handed to stop(), in the main thread
            self._error = exc

    def stop(self) -> PowerSamples:
        self._done.set()
        self._thread.join()
        if self._error is not None:
            raise UserError(f"--energy: reading the energy counter failed during the run ({self._error})")
        self._take()  # and one after the last window closed
        return self._samples
