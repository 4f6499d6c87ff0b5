"""The Jinja environment every report uses: templates/ with `say(key, **values)`, which renders a sentence of
the report's words (messages/*.toml) with the template's context."""

from __future__ import annotations

from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined, pass_context


def template_environment(words: dict[str, Any], filters: dict[str, Any]) -> Environment:
    """Jinja environment over templates/ with `filters` and `say(key, **values)`, which renders the snippet
    words["text"][key] with the template's context and the values given."""
    env = Environment(
        loader=PackageLoader("kernelscope.report", "templates"),
        undefined=StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(filters)
    compiled: dict[str, Any] = {}

    @pass_context
    def say(context: Any, key: str, **values: Any) -> str:
        if key not in compiled:
            compiled[key] = env.from_string(words["text"][key])
        return compiled[key].render({**context.get_all(), **values}).rstrip()

    env.globals.update(say=say)
    return env
