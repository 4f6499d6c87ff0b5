"""A kernel's name as the catalog reads it: demangled (Itanium names), normalised (lambdas, casts and integer suffixes spelled one way whatever the recorder), its qualified name and first template argument's name at the front, and a short stand-in for a name no rule knows."""

from __future__ import annotations

import re

# ---------------------------------------------------------------- name normalisation
# Kineto/CUPTI, Nsight (Compute and Systems) and the LLVM demangler spell the same symbol differently;
# these rewrite every spelling into Kineto's, minus literal suffixes and cosmetic spaces.
_NSIGHT_LAMBDA = re.compile(r"\[lambda\(([^()\[\]]{0,200})\) \(instance (\d{1,4})\)\]")


_LLVM_LAMBDA = re.compile(r"'lambda(\d{0,4})'\(([^()]{0,200})\)")


_HAS_CAST = re.compile(r"\((?:int|bool|unsigned |signed |long|short|char)\)?")


_INT_CAST = re.compile(r"\((?:unsigned |signed )?(?:int|long long|long|short|char)\)(-?\d+)")


# `[ul]` first lets the engine skip quickly to candidate characters; the lookbehind then wants a digit.
_INT_SUFFIX = re.compile(r"[ul](?<=\d[ul])[ul]{0,2}(?=[,>])")


def _llvm_lambda(match: re.Match[str]) -> str:
    # LLVM prints the first closure of a scope as 'lambda', the second as 'lambda0', and so on.
    number = int(match.group(1)) + 2 if match.group(1) else 1
    return f"{{lambda({match.group(2)})#{number}}}"


# LLVM's demangler recurses once per nesting level and has no depth limit of its own: a hostile symbol of some
# 64k characters (`_Z1fFFFF…`) overflows the C stack and kills the process. Real kernel symbols stay under 2k
# characters; longer ones are classified as written.
_DEMANGLE_MAX_CHARS = 4096


def demangle(name: str) -> str | None:
    """The demangled form of an Itanium-mangled symbol (`_Z…`), or None when it is not one (or is longer than
    _DEMANGLE_MAX_CHARS, or cannot be passed to the demangler)."""
    import pycxxfilt

    if len(name) > _DEMANGLE_MAX_CHARS:
        return None
    try:
        return pycxxfilt.demangle(name)
    except (ValueError, UnicodeError):
        return None


def normalize(name: str) -> str:
    """One spelling for every way profilers write a kernel's symbol (see docs/catalog.md)."""
    text = name.strip()
    if text.isidentifier() and not text.startswith("_Z"):
        return text  # generated names (nvjet_…, triton_…, cudnn_generated_…) need nothing more
    if text.startswith("_Z"):
        text = demangle(text) or text
    if text.startswith("void "):
        text = text[5:]
    elif text.startswith("std::enable_if<"):
        # The condition may hold brackets of its own (vLLM: `<(((8)>(0)))&&…, void>::type`).
        end = text.find(">::type ", 0, 400)
        if end > 0:
            text = text[end + 8 :]
    if "[lambda" in text:
        text = _NSIGHT_LAMBDA.sub(r"{lambda(\1)#\2}", text)
    if "'lambda" in text:
        text = _LLVM_LAMBDA.sub(_llvm_lambda, text)
    if "<unnamed>" in text:
        text = text.replace("<unnamed>", "(anonymous namespace)")
    if ")" in text and _HAS_CAST.search(text):
        text = _INT_CAST.sub(r"\1", text)
        if "(bool)" in text:
            text = text.replace("(bool)0", "false").replace("(bool)1", "true")
    if "<" in text and ("u>" in text or "l>" in text or "u," in text or "l," in text):
        text = _INT_SUFFIX.sub("", text)
    if " " in text:
        # No space before `>`, `*` or `&` (`> >`, `char *`, `T &`), but keep `, &fn` apart.
        text = text.replace(" >", ">").replace(" *", "*").replace(" &", "&").replace(",&", ", &")
        text = text.replace("operator ()", "operator()")
    return text


# The kernel's own qualified name at the front of a normalised name, e.g. `at::native::foo` in
# `at::native::foo<…>(…)`; possessive so that a long run of word characters cannot backtrack.
QUALIFIED_HEAD = re.compile(r"(?:\(anonymous namespace\)|[A-Za-z_~$][\w$]*+)(?:::(?:\(anonymous namespace\)|[A-Za-z_~$][\w$]*+))*+")


def name_heads(text: str) -> tuple[str, str]:
    """The kernel's qualified name and its first template argument's name (wrappers such as
    `cutlass::device_kernel<flash::…>` are known by what they wrap)."""
    head = QUALIFIED_HEAD.match(text)
    if head is None:
        # Not a C++ name (e.g. `[CUDA memcpy …]` from nsys): its first run of non-spaces stands in.
        return (text.split(" ", 1)[0], "")
    end = head.end()
    if end < len(text) and text[end] == "<":
        inner = QUALIFIED_HEAD.match(text, end + 1)
        if inner is not None:
            return (head.group(), inner.group())
    return (head.group(), "")


def _head_words(text: str) -> list[str]:
    """The `::` components of the names that `name_heads` finds."""
    return [word for head in name_heads(text) if head for word in head.split("::")]


_SHORT_CHARS = 80


_SHORT_HEAD_CHARS = 200


def shorten(text: str) -> str:
    """A readable stand-in for a name no rule knows: its qualified name, template arguments collapsed (a name
    without one, or a qualified name of absurd length, cut)."""
    head = QUALIFIED_HEAD.match(text)
    if head is None or head.end() == 0:
        return text if len(text) <= _SHORT_CHARS else text[:_SHORT_CHARS - 1] + "…"
    if head.end() > _SHORT_HEAD_CHARS:
        return text[:_SHORT_HEAD_CHARS - 1] + "…"
    tail = "<…>" if head.end() < len(text) and text[head.end()] == "<" else ""
    return head.group() + tail
