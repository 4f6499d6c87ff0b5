"""What a step's annotation says of its batch, as the numbers attention costs need (docs/roofline.md).

Serving engines that annotate their steps with per-part sums (vLLM's and SGLang's
`execute_…_context_P(sq…sk…sqsq…sqsk…)_generation_D(sq…sk…sqsq…sqsk…)`) give, for the prefill (context) and the
decode (generation) requests of a step: the query tokens Σsq, the key/value tokens Σsk (each sequence's context,
the new tokens included), Σsq² and Σsq·sk. With causal attention aligned to the end of each sequence, query i of
a sequence of sq queries and sk keys sees sk − sq + i + 1 keys, so a sequence computes sq·sk − sq·(sq − 1)/2
query-key pairs and the step Σsq·sk − (Σsq² − Σsq)/2. A decode request has sq = 1: its pairs are its sk.
Where an annotation gives the products but not the squares (vLLM's older `execute_context_P(T_X)`), the keys are
taken to be the queries (no cached prefix: sk = sq), which the products then equal. A prefill marker that gives only
requests and tokens (SGLang's `step[EXTEND bs=N toks=T]`) is taken as N equal prompts with nothing cached, and its
costs are labelled estimated.
"""

from __future__ import annotations

from dataclasses import dataclass

from kernelscope.contracts.run_info import StepInfo


@dataclass(frozen=True)
class StepTokens:
    """Per step: query tokens, key/value tokens read (Σ contexts) and query-key pairs of causal attention; None
    where the annotation does not give them."""

    q_tokens: int | None = None
    kv_tokens: int | None = None
    pairs: float | None = None
    requests: int | None = None
    estimated: bool = False  # the counts rest on an assumption (equal prompts, no cached prefix), not on sums


def _part(tokens: int | None, kv: int | None, squares: int | None, products: int | None,
          decode: bool) -> tuple[int, int, float] | None:
    """(queries, keys, pairs) of one part of a step, or None when its keys are not known."""
    if not tokens:
        return (0, 0, 0.0)
    if decode:  # one query per request
        squares = tokens if squares is None else squares
        products = kv if products is None else products
    if products is None:
        return None
    if squares is None:  # keys taken to be the queries: Σsq·sk = Σsq²
        squares, kv = products, tokens if kv is None else kv
    if kv is None:
        return None
    return (tokens, kv, products - (squares - tokens) / 2)


def step_tokens(step: StepInfo) -> StepTokens:
    prefill = _part(step.prefill_tokens, step.prefill_kv_tokens, step.prefill_query_squares,
                    step.prefill_query_kv_products, decode=False)
    decode = _part(step.decode_tokens, step.decode_kv_tokens, step.decode_query_squares,
                   step.decode_query_kv_products, decode=True)
    requests = None if step.prefill_requests is None and step.decode_requests is None else \
        (step.prefill_requests or 0) + (step.decode_requests or 0)
    if prefill is None or decode is None or (step.prefill_tokens is None and step.decode_tokens is None):
        return _prefill_of_equal_prompts(step) or StepTokens(requests=requests or step.requests)
    q, kv, pairs = (prefill[i] + decode[i] for i in range(3))
    return StepTokens(q_tokens=int(q), kv_tokens=int(kv), pairs=float(pairs), requests=requests)


def _prefill_of_equal_prompts(step: StepInfo) -> StepTokens | None:
    """A prefill step whose marker gives only its requests and tokens (SGLang's `step[EXTEND bs=N toks=T]`):
    taken to be N prompts of T/N tokens each with nothing cached (N·L·(L + 1)/2 causal pairs), labelled estimated."""
    if step.phase != "prefill" or not step.requests or not step.tokens or step.tokens < step.requests:
        return None
    length = step.tokens / step.requests
    return StepTokens(q_tokens=step.tokens, kv_tokens=step.tokens, pairs=step.requests * length * (length + 1) / 2,
                      requests=step.requests, estimated=True)
