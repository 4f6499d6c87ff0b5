"""Run a fixed-length generation with transformers' generate(), and time it.

Decode length is fixed: EOS is ignored (no eos_token_id), so every run decodes exactly `new_tokens`. Decoding is
greedy (temperature 0) or samples at a temperature from a generator seeded per generation, so repeated runs make
the same tokens; no_repeat_ngram_size bans repeated n-grams as transformers does.
"""

from __future__ import annotations

import statistics
import time
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import torch

from kernelscope.contracts.run_info import TimingSummary
from kernelscope.errors import UserError


@dataclass(frozen=True)
class GenerationSettings:
    batch_size: int = 1
    prompt_len: int = 128
    new_tokens: int = 64
    seed: int = 0
    temperature: float = 0.0
    no_repeat_ngram_size: int = 0

    def validate(self, max_positions: int | None) -> None:
        for name, value, low in (
            ("--batch-size", self.batch_size, 1),
            ("--prompt-len", self.prompt_len, 1),
            ("--new-tokens", self.new_tokens, 1),
            ("--no-repeat-ngram-size", self.no_repeat_ngram_size, 0),
        ):
            if value < low:
                raise UserError(f"{name} must be at least {low}, got {value}")
        if not self.temperature >= 0 or self.temperature == float("inf"):
            raise UserError(f"--temperature must be a finite number ≥ 0 (0: greedy), got {self.temperature}")
        self.validate_length(self.prompt_len, max_positions)

    def validate_length(self, prompt_len: int, max_positions: int | None, prompt: str = "--prompt-len") -> None:
        total = prompt_len + self.new_tokens
        if max_positions is not None and total > max_positions:
            raise UserError(
                f"{prompt} {prompt_len} + --new-tokens {self.new_tokens} = {total} exceeds the "
                f"model's {max_positions} positions (max_position_embeddings)"
            )


def make_prompt(settings: GenerationSettings, vocab_size: int, device: torch.device) -> torch.Tensor:
    """Random token ids: kernel profiles depend on lengths, not on which tokens."""
    generator = torch.Generator().manual_seed(settings.seed)
    ids = torch.randint(0, vocab_size, (settings.batch_size, settings.prompt_len), generator=generator)
    return ids.to(device)


class StepClock:
    """Marks the start of generate(), the start of every forward pass and the end. On CUDA the marks
    are device events (no synchronisation inside the loop); on CPU, host timestamps."""

    def __init__(self, device: torch.device) -> None:
        self._cuda = device.type == "cuda"
        self._marks: list[Any] = []

    def mark(self) -> None:
        if self._cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self._marks.append(event)
        else:
            self._marks.append(time.perf_counter())

    def hook(self, module: torch.nn.Module, args: Any) -> None:
        self.mark()

    def elapsed_ms(self) -> list[float]:
        """Milliseconds from the first mark to each mark."""
        if self._cuda:
            torch.cuda.synchronize()
            first = self._marks[0]
            return [first.elapsed_time(m) for m in self._marks]
        return [(m - self._marks[0]) * 1e3 for m in self._marks]


@dataclass(frozen=True)
class RunTimes:
    """One generation: marks are [start, forward 1, forward 2, …, forward N, end] in ms from start."""

    marks_ms: list[float]
    new_tokens: int
    batch_size: int

    @property
    def e2e_ms(self) -> float:
        return self.marks_ms[-1]

    @property
    def ttft_ms(self) -> float:
        # The first token exists when the second forward pass starts (or generate() ends).
        return self.marks_ms[2] if self.new_tokens > 1 else self.marks_ms[-1]

    @property
    def tpot_ms(self) -> float | None:
        if self.new_tokens < 2:
            return None
        return (self.e2e_ms - self.ttft_ms) / (self.new_tokens - 1)


def summarize_times(runs: list[RunTimes]) -> TimingSummary:
    """Medians over repeated runs, and every run's values (for their spread)."""
    e2e = statistics.median(r.e2e_ms for r in runs)
    ttft = statistics.median(r.ttft_ms for r in runs)
    tpots = [r.tpot_ms for r in runs if r.tpot_ms is not None]
    tpot = statistics.median(tpots) if tpots else None
    tokens = runs[0].new_tokens * runs[0].batch_size
    return TimingSummary(
        ttft_ms=ttft,
        tpot_ms=tpot,
        tokens_per_s=tokens / (e2e / 1e3) if e2e > 0 else None,
        e2e_ms=e2e,
        decode_tokens_per_s=runs[0].batch_size * 1e3 / tpot if tpot else None,
        repeats=len(runs),
        e2e_ms_all=[r.e2e_ms for r in runs],
        ttft_ms_all=[r.ttft_ms for r in runs],
        tpot_ms_all=tpots,
    )


def decoding_description(settings: GenerationSettings) -> str:
    """How tokens are chosen, for run.json (workload.decoding)."""
    how = (f"sampling at temperature {settings.temperature:g} (seed {settings.seed})" if settings.temperature > 0
           else "greedy")
    if settings.no_repeat_ngram_size:
        how += f", no repeated {settings.no_repeat_ngram_size}-grams"
    return how + ", EOS ignored"


def generate_fixed(model: torch.nn.Module, inputs: torch.Tensor | dict[str, torch.Tensor],
                   settings: GenerationSettings) -> torch.Tensor:
    """Generation of exactly settings.new_tokens tokens; returns only the new tokens. `inputs`: prompt ids, or the
    model's keyword inputs (input_ids and, for a vision model, its pixel tensors)."""
    from transformers import GenerationConfig

    tensors = dict(inputs) if isinstance(inputs, dict) else {"input_ids": inputs}
    input_ids = tensors["input_ids"]
    tensors.setdefault("attention_mask", torch.ones_like(input_ids))
    model.generation_config.eos_token_id = None
    sample = settings.temperature > 0
    config = GenerationConfig(
        max_new_tokens=settings.new_tokens,
        min_new_tokens=None,
        do_sample=sample,
        temperature=settings.temperature if sample else None,
        top_k=0 if sample else None,
        top_p=1.0 if sample else None,
        no_repeat_ngram_size=settings.no_repeat_ngram_size or None,
        num_beams=1,
        eos_token_id=None,
        pad_token_id=0,
        use_cache=True,
    )
    if sample:
        torch.manual_seed(settings.seed)
    try:
        with torch.inference_mode():
            out = model.generate(**tensors, generation_config=config)
    except torch.OutOfMemoryError:
        raise UserError(
            f"CUDA out of memory during generation (batch {input_ids.shape[0]}, prompt {input_ids.shape[1]}, "
            f"{settings.new_tokens} new tokens): lower --batch-size or the lengths"
        ) from None
    new = out[:, input_ids.shape[1] :]
    if new.shape[1] != settings.new_tokens:
        raise RuntimeError(f"generate() returned {new.shape[1]} new tokens, expected {settings.new_tokens}")
    return new


def timed_generate(
    model: torch.nn.Module,
    inputs: torch.Tensor | dict[str, torch.Tensor],
    settings: GenerationSettings,
    annotator: Any | None = None,
) -> tuple[torch.Tensor, RunTimes]:
    """One generation with a StepClock (and, if given, the annotator's ranges)."""
    input_ids = inputs["input_ids"] if isinstance(inputs, dict) else inputs
    clock = StepClock(input_ids.device)
    handle = model.register_forward_pre_hook(clock.hook)
    try:
        with annotator if annotator is not None else nullcontext():
            clock.mark()
            if annotator is not None:
                annotator.begin()
            tokens = generate_fixed(model, inputs, settings)
            if annotator is not None:
                annotator.end()
            clock.mark()
    finally:
        handle.remove()
    return tokens, RunTimes(clock.elapsed_ms(), settings.new_tokens, int(input_ids.shape[0]))
