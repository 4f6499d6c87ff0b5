"""What every page (report, comparison, what-if) shares: the Jinja environment over templates/ with
`say(key, **values)`, which renders a sentence of the page's words (messages/*.toml) with the template's context;
the word catalogs; the CSV tables beside the page."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import polars as pl
from jinja2 import (
    Environment,
    PackageLoader,
    StrictUndefined,
    Template,
    pass_context,
)

from kernelscope import inert
from kernelscope.filenames import safe_component
from kernelscope.packaged import packaged_toml
from kernelscope.report.formatting import Markdown, code, escape_value, inline_code, markdown_text
from kernelscope.report.template_cache import bytecode_cache


@cache
def message_catalog(kind: str, lang: str) -> dict[str, Any]:
    """The words of one kind of page in one language: messages/<lang>.toml for the report (kind ""),
    messages/<kind>.<lang>.toml for the others (compare, whatif)."""
    name = f"{kind}.{lang}" if kind else lang
    return packaged_toml("kernelscope.report", f"messages/{name}.toml")


def write_csv_tables(frames: dict[str, pl.DataFrame], directory: Path) -> list[Path]:
    """tables/<name>.csv for every frame (the name made one safe path component: names carry phase names read
    from the input); the paths written."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, frame in frames.items():
        path = directory / f"{safe_component(name, fallback='table')}.csv"
        inert.csv_frame(frame).write_csv(path)
        paths.append(path)
    return paths


def template_environment(words: dict[str, Any], filters: dict[str, Any], cache_namespace: str | None = None
                         ) -> Environment:
    """Jinja environment over templates/ with `filters` and `say(key, **values)`, which renders the snippet
    words["text"][key] with the template's context and the values given. With `cache_namespace` (the page kind,
    its language and whatever else its filters depend on), compiled templates and snippets are kept between
    runs (template_cache)."""
    env = Environment(
        loader=PackageLoader("kernelscope.report", "templates"),
        bytecode_cache=bytecode_cache(cache_namespace) if cache_namespace else None,
        undefined=StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        finalize=escape_value,  # every plain string a template prints is input data: escaped for Markdown
    )
    # Input strings inside code spans or as text, on every page (templates may not put `{{ value }}` in backticks:
    # escaping does not apply inside a code span): `code` in table cells, `inline_code` in sentences.
    env.filters.update(code=code, inline_code=inline_code, text=markdown_text)
    env.filters.update(filters)
    compiled: dict[str, Template] = {}

    @pass_context
    def say(context: Any, key: str, **values: Any) -> Markdown:
        if key not in compiled:
            compiled[key] = text_template(env, f"text:{key}", words["text"][key])
        return Markdown(compiled[key].render({**context.get_all(), **values}).rstrip())

    env.globals.update(say=say)
    return env


def text_template(env: Environment, name: str, source: str) -> Template:
    """env.from_string(source), through the environment's compiled-template cache under `name` when it has one
    (Jinja checks the source: a name whose text changed is compiled again)."""
    cache = env.bytecode_cache
    if cache is None:
        return env.from_string(source)
    bucket = cache.get_bucket(env, name, None, source)
    if bucket.code is None:
        bucket.code = env.compile(source, name)
        cache.set_bucket(bucket)
    return env.template_class.from_code(env, bucket.code, env.make_globals(None), None)
