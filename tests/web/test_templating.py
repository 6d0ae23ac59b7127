"""Every {{ ... }} on a page is written by one call (``shown``) in place of Jinja's own
``escape(finalize(...))``: the same text, hostile input included."""

from __future__ import annotations

import enum
from datetime import date
from typing import Any

import jinja2
import pytest
from markupsafe import Markup, escape

from app.web.templating import _format_characters_shown, shown, templates


class Color(enum.StrEnum):
    RED = "<red>"


VALUES: list[Any] = [
    "plain", "<script>alert('x')</script>", 'a "quoted" & <tagged> value', "acme\u202egnp.exe",
    "two\nlines\twith\u200bhidden", "", 0, 42, -7, True, None, 1.5, date(2026, 12, 4),
    Markup("<b>bold</b>"), Markup("<b>acme\u202egnp</b>"), Markup("<pre>a\nb</pre>"),
    Color.RED, ["<a>"], {"k": "<v>"},
]


@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_a_value_is_written_as_jinja_would_write_it(value: Any) -> None:
    assert shown(value) == str(escape(_format_characters_shown(value)))


def test_a_hidden_format_character_is_written_out_and_markup_is_escaped() -> None:
    assert shown("acme\u202egnp") == "acme[U+202E]gnp"
    assert shown("<i>") == "&lt;i&gt;"
    assert shown(Markup("<i>")) == "<i>"


TEMPLATE = """{% macro cell(v) %}<td>{{ v }}</td>{% endmacro %}
{% for v in values %}{{ v }}|{{ cell(v) }}|{{ v ~ "!" }}|{{ v | string | upper }}
{% endfor %}{% set kept %}{{ values[1] }}{% endset %}{{ kept }}
{% autoescape false %}{{ values[1] }}{% endautoescape %}
{% autoescape flag %}{{ values[1] }}{% endautoescape %}
{{ missing }}{{ "<" ~ values[0] }}{{ values[3] | e }}"""


@pytest.mark.parametrize("flag", [True, False])
def test_a_template_renders_the_same_bytes_as_with_jinjas_own_output_code(flag: bool) -> None:
    reference = jinja2.Environment(autoescape=True, finalize=_format_characters_shown)
    context = {"values": VALUES, "flag": flag}
    ours = templates.env.from_string(TEMPLATE).render(context)
    assert ours == reference.from_string(TEMPLATE).render(context)
    assert "&lt;script&gt;" in ours and "<script>" in ours  # escaped, except where turned off
