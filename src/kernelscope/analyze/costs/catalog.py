"""Kernel catalog: give a GPU kernel name a library, a category, a friendly name and a description.

The knowledge lives in `data/kernel_catalog.toml` (ordered rules, first match wins); this module is the
generic engine that normalises names, picks the rules worth trying, and renders the templates.
docs/catalog.md explains the rule format.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

import polars as pl

from kernelscope.analyze.costs.kernel_spelling import QUALIFIED_HEAD, name_heads, normalize, shorten
from kernelscope.cycles import cycle_collection_paused
from kernelscope.load import knowledge

UNKNOWN_LIBRARY = "unknown"
OTHER_CATEGORY = "other"
CATALOG_COLUMNS = ["library", "category", "friendly_name", "description"]

# Fields and finds look at most this far past the start of a rule's match: the parts of a signature
# that name a kernel sit near its front, and the bound keeps a pathological name linear.
_FIND_WINDOW = 4096
_KEY_PREFIX = 3  # rules are indexed by the first characters of their keys


@dataclass(frozen=True)
class KernelInfo:
    library: str
    category: str
    friendly_name: str
    description: str
    rule: str | None


_FALLBACK_WORD_SPAN = 256  # characters at the end of an unknown qualified name searched for category words


# ---------------------------------------------------------------- rules
Value = str | dict[str, str]


@dataclass(frozen=True)
class _Table:
    """Token → words (or several fields at once). `word` tables find the leftmost whole token (types,
    functors in a signature); `part` tables take the first entry, in table order, found anywhere (words
    inside identifiers)."""

    values: dict[str, Value]
    mode: str
    regex: re.Pattern[str] | None

    def find(self, text: str, start: int, end: int) -> Value | None:
        if self.regex is None:
            for token, value in self.values.items():
                if text.find(token, start, end) >= 0:
                    return value
            return None
        # The regex has no lookbehind (that would slow every position); check the left edge here.
        match = self.regex.search(text, start, end)
        while match is not None and match.start() > 0 and _is_word_char(text[match.start() - 1]):
            match = self.regex.search(text, match.start() + 1, end)
        return None if match is None else self.values[match.group()]


def _is_word_char(char: str) -> bool:
    return char.isalnum() or char == "_"


def _build_table(name: str, spec: dict) -> _Table:
    mode = spec.get("match", "word")
    values = dict(spec.get("values", {}))
    if mode not in ("word", "part") or not values:
        raise ValueError(f"kernel catalog: table '{name}' needs match = 'word' or 'part' and some values")
    regex = re.compile(rf"{_trie_pattern(list(values))}(?!\w)") if mode == "word" else None
    return _Table(values, mode, regex)


def _trie_pattern(words: list[str]) -> str:
    """An alternation of words factored by common prefixes, so the engine tests a few characters per
    position instead of every word (several times faster than a flat `a|b|c` on long tables)."""
    trie: dict = {}
    for word in words:
        node = trie
        for char in word:
            node = node.setdefault(char, {})
        node[""] = {}

    def emit(node: dict) -> str:
        branches = [re.escape(char) + emit(child) for char, child in sorted(node.items()) if char]
        if not branches:
            return ""
        body = branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
        # A word that ends here may also go on: try the longer words first, then stop.
        return f"(?:{body})?" if "" in node else body

    return "(?:" + emit(trie) + ")"


_TEMPLATE_PART = re.compile(r"\[([^\[\]]*)\]|\{(\w+)(?:\|([^{}\[\]]*))?\}")
_FIELD = re.compile(r"\{(\w+)(?:\|([^{}\[\]]*))?\}")

# A compiled template is a list of (kind, a, b): (LITERAL, text, None), (FIELD, name, default) or
# (OPTIONAL, names, parts).
LITERAL, FIELD, OPTIONAL = 0, 1, 2
Part = tuple


def _compile_parts(template: str, pattern: re.Pattern[str]) -> list[Part]:
    parts: list[Part] = []
    position = 0
    for match in pattern.finditer(template):
        if match.start() > position:
            parts.append((LITERAL, template[position : match.start()], None))
        if pattern is _TEMPLATE_PART and match.group(1) is not None:  # an optional [...] segment
            inner = _compile_parts(match.group(1), _FIELD)
            names = tuple(part[1] for part in inner if part[0] == FIELD)
            parts.append((OPTIONAL, names, inner))
        elif pattern is _TEMPLATE_PART:
            parts.append((FIELD, match.group(2), match.group(3)))
        else:
            parts.append((FIELD, match.group(1), match.group(2)))
        position = match.end()
    if position < len(template):
        parts.append((LITERAL, template[position:], None))
    return parts


def compile_template(template: str) -> list[Part]:
    """`{field}` takes a value (`{field|text}` falls back to text); a `[…]` segment is left out when a
    field in it has no value."""
    return _compile_parts(template, _TEMPLATE_PART)


def render(parts: list[Part], fields: dict[str, str]) -> str:
    """Fill a compiled template. Empty parentheses, and a comma left at the start of parentheses, are
    tidied away."""
    out: list[str] = []
    for kind, a, b in parts:
        if kind == LITERAL:
            out.append(a)
        elif kind == FIELD:
            out.append(fields.get(a) or b or "?")
        else:
            for name in a:
                if not fields.get(name):
                    break
            else:
                for k, x, _ in b:
                    out.append(x if k == LITERAL else fields[x])
    text = "".join(out)
    if "(" in text:
        text = text.replace(" ()", "").replace("()", "").replace("(, ", "(")
    return text.strip()


def _set(fields: dict[str, str], field: str, value: Value) -> None:
    if isinstance(value, dict):
        fields.update(value)
    elif value:
        fields[field] = value


@dataclass(frozen=True)
class _Rule:
    index: int
    id: str
    keys: tuple[str, ...]
    regex: re.Pattern[str]
    library: str
    category: list[Part]
    friendly: list[Part]
    description: str
    maps: dict[str, _Table]
    finds: dict[str, _Table]
    require: tuple[str, ...]
    fixed_category: bool

    def apply(self, text: str, matches: dict[re.Pattern[str], re.Match[str] | None]) -> KernelInfo | None:
        # Rules of one family often share a pattern: search it once per name.
        regex = self.regex
        if regex in matches:
            match = matches[regex]
        else:
            match = matches[regex] = regex.search(text)
        if match is None:
            return None
        fields: dict[str, str] = {}
        if regex.groups:
            maps = self.maps
            for field, value in match.groupdict().items():
                if value:
                    table = maps.get(field)
                    if table is None:
                        fields[field] = value
                    else:
                        _set(fields, field, table.values.get(value, value))
        if self.finds:
            start = match.start()
            end = min(len(text), start + _FIND_WINDOW)
            for field, table in self.finds.items():  # required finds come first (see _build_rule)
                if field not in fields:
                    found = table.find(text, start, end)
                    if found:
                        _set(fields, field, found)
                    elif field in self.require:
                        return None
        for field in self.require:
            if not fields.get(field):
                return None
        category = self.category[0][1] if self.fixed_category else render(self.category, fields)
        if not category or "?" in category:
            category = OTHER_CATEGORY
        return KernelInfo(self.library, category, render(self.friendly, fields), self.description, self.id)


def _build_rule(index: int, spec: dict, tables: dict[str, _Table]) -> _Rule:
    rule_id = spec.get("id", f"#{index}")
    missing = [k for k in ("id", "pattern", "library", "category", "friendly", "description") if k not in spec]
    if missing:
        raise ValueError(f"kernel catalog: rule {rule_id} lacks {', '.join(missing)}")
    keys = tuple(spec.get("keys", ()))
    if any(len(key) < _KEY_PREFIX for key in keys):
        raise ValueError(f"kernel catalog: rule {rule_id} has a key shorter than {_KEY_PREFIX} characters")

    def pick(section: str) -> dict[str, _Table]:
        chosen = spec.get(section, {})
        unknown = [name for name in chosen.values() if name not in tables]
        if unknown:
            raise ValueError(f"kernel catalog: rule {rule_id} uses unknown table(s) {unknown}")
        return {field: tables[name] for field, name in chosen.items()}

    require = tuple(spec.get("require", ()))
    finds = pick("find")
    finds = {f: finds[f] for f in sorted(finds, key=lambda f: f not in require)}
    return _Rule(
        index=index, id=rule_id, keys=keys, regex=re.compile(spec["pattern"]), library=spec["library"],
        category=compile_template(spec["category"]), friendly=compile_template(spec["friendly"]),
        description=spec["description"],
        maps=pick("map"), finds=finds, require=require,
        fixed_category=all(part[0] == LITERAL for part in compile_template(spec["category"])),
    )


class Catalog:
    """The compiled rules and the index that picks, for a name, the few rules worth trying."""

    def __init__(self, document: dict) -> None:
        tables = {name: _build_table(name, spec) for name, spec in document.get("tables", {}).items()}
        self.rules = [_build_rule(i, spec, tables) for i, spec in enumerate(document.get("rule", []))]
        ids = [rule.id for rule in self.rules]
        if len(set(ids)) != len(ids):
            raise ValueError("kernel catalog: rule ids must be unique")
        # A rule with keys is tried only on names whose head words start with one of them; a rule
        # without keys is tried on every name (keep those few and anchored).
        self._by_prefix: dict[str, list[tuple[str, int]]] = {}
        for rule in self.rules:
            for key in rule.keys:
                self._by_prefix.setdefault(key[:_KEY_PREFIX], []).append((key, rule.index))
        # Which keys a word starts with depends only on its first `longest key` characters.
        self._key_span = {prefix: max(len(key) for key, _ in entries) for prefix, entries in self._by_prefix.items()}
        self._word_rules: dict[str, tuple[int, ...]] = {}
        self._everywhere = tuple(rule.index for rule in self.rules if not rule.keys)
        # A name no rule matches takes its category from the words of its qualified name (the table the
        # document's [fallback] names), never from its template arguments (types such as `index_t`).
        words = document.get("fallback", {}).get("category_words")
        if words is not None and words not in tables:
            raise ValueError(f"kernel catalog: [fallback] names unknown table '{words}'")
        self._fallback_words = tables[words] if words is not None else None

    def candidates(self, text: str) -> tuple[int, ...]:
        """Indices, in rule order, of the rules whose keys start a word of the name's head, and of the
        rules without keys."""
        found: list[tuple[int, ...]] = []
        for head in name_heads(text):
            if head:
                for word in head.split("::"):
                    hits = self._rules_of_word(word)
                    if hits:
                        found.append(hits)
        if not found:
            return self._everywhere
        return self._merge(tuple(found))

    def _rules_of_word(self, word: str) -> tuple[int, ...]:
        prefix = word[:_KEY_PREFIX]
        span = self._key_span.get(prefix)
        if span is None:
            return ()
        stem = word[:span]
        hits = self._word_rules.get(stem)
        if hits is None:
            hits = tuple(index for key, index in self._by_prefix[prefix] if stem.startswith(key))
            if len(self._word_rules) < 1 << 16:
                self._word_rules[stem] = hits
        return hits

    @functools.lru_cache(maxsize=4096)  # noqa: B019 - one catalog lives for the whole process
    def _merge(self, found: tuple[tuple[int, ...], ...]) -> tuple[int, ...]:
        return tuple(sorted(set(self._everywhere).union(*found)))

    def classify(self, name: str) -> KernelInfo:
        text = normalize(name)
        matches: dict[re.Pattern[str], re.Match[str] | None] = {}
        for index in self.candidates(text):
            info = self.rules[index].apply(text, matches)
            if info is not None:
                return info
        return KernelInfo(UNKNOWN_LIBRARY, self._fallback_category(text), shorten(text), "", None)

    def _fallback_category(self, text: str) -> str:
        head = QUALIFIED_HEAD.match(text)
        if self._fallback_words is None or head is None:
            return OTHER_CATEGORY
        # The kernel's own name ends the qualified name: its last characters hold the words worth reading (a
        # pathological name of many thousand namespaces is not searched through).
        found = self._fallback_words.find(text, max(0, head.end() - _FALLBACK_WORD_SPAN), head.end())
        return found if isinstance(found, str) else OTHER_CATEGORY


@functools.cache
def load_catalog() -> Catalog:
    """The catalog shipped with the package, compiled once."""
    return Catalog(knowledge.kernel_catalog())


_CACHE: dict[str, KernelInfo] = {}
_CACHE_LIMIT = 1 << 18  # distinct names kept; a run has thousands at most


def classify(name: str) -> KernelInfo:
    """Library, category, friendly name and description of one kernel name (any profiler's spelling).
    Cached per distinct name."""
    info = _CACHE.get(name)
    if info is None:
        if len(_CACHE) >= _CACHE_LIMIT:
            _CACHE.clear()
        info = _CACHE[name] = load_catalog().classify(name)
    return info


def clear_cache() -> None:
    """Forget the names classified so far (benchmarks use it to time a cold start)."""
    _CACHE.clear()


def classify_frame(names: pl.Series) -> pl.DataFrame:
    """One row per distinct name: name, library, category, friendly_name, description."""
    distinct = names.drop_nulls().unique(maintain_order=True).to_list()
    with cycle_collection_paused():  # a quarter of the time for 100,000 names
        infos = [classify(name) for name in distinct]
    return pl.DataFrame(
        {
            "name": distinct,
            "library": [info.library for info in infos],
            "category": [info.category for info in infos],
            "friendly_name": [info.friendly_name for info in infos],
            "description": [info.description for info in infos],
        },
        schema={"name": pl.String, **{column: pl.String for column in CATALOG_COLUMNS}},
    )


def with_catalog(kernels: pl.DataFrame) -> pl.DataFrame:
    """`kernels` with the catalog's columns joined on `name` (rows and their order kept)."""
    base = kernels.drop([column for column in CATALOG_COLUMNS if column in kernels.columns])
    return base.join(classify_frame(base["name"]), on="name", how="left", maintain_order="left")
