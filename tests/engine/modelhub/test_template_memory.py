"""A model's chat template may not pile up memory: values each within the size limit, kept in a
namespace, in many `{% set %}`s or down a macro's recursion, reached gigabytes before the
2-second limit stopped them. Each hostile template runs in its own child process (capped at
3 GB of address space, so a regression fails instead of taking the machine's memory), through
the check an import runs and through a real import, and must fail fast, saying why, with its
peak memory low. Real templates on long conversations still render as jinja2 renders them."""

from __future__ import annotations

import json
import subprocess
import sys

import jinja2
import pytest
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

from wren.engine.chat_template import compile_chat_template, render_limited

BIG = "{% set b = 'x' * 1000000 %}"
PILING_UP = {
    # a 100,000-number list (each within the size limit) kept in a namespace on each pass
    "namespace": "{% set ns = namespace(a=[]) %}{% for i in range(100000) %}"
                 "{% set ns.a = ns.a + [range(100000)|list] %}{% endfor %}",
    # a 1 MB string slice kept on each pass (slices are plain copies jinja2 does not see)
    "slices": BIG + "{% set ns = namespace(a=[]) %}{% for i in range(100000) %}"
                    "{% set ns.a = ns.a + [b[i:]] %}{% endfor %}",
    # a method's 1 MB result kept on each pass
    "calls": "{% set b = ' ' + 'x' * 1000000 %}{% set ns = namespace(a=[]) %}{% for i in range(100000) %}"
             "{% set ns.a = ns.a + [b.strip()] %}{% endfor %}",
    # one kept value per statement
    "many-sets": "".join(f"{{% set a{i} = range(100000)|list %}}" for i in range(1000)),
    # one kept value per level of a recursion
    "recursion": BIG + "{% macro f(n, a) %}{% if n %}{{ f(n-1, b[n:]) }}{% endif %}{% endmacro %}{{ f(900, 0) }}",
    "recursion-lists": "{% macro f(n, a) %}{% if n %}{{ f(n-1, range(100000)|list) }}{% endif %}{% endmacro %}"
                       "{{ f(900, 0) }}",
}

CHILD = r"""
import json, resource, sys, time
resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))
mode, arg, template = sys.argv[1], sys.argv[2], sys.stdin.read()
from wren.engine.errors import WrenError
from wren.engine.chat_template import validate_chat_template

def peak_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

if mode == "import":
    from pathlib import Path
    from wren.engine.modelhub.registry import ModelRegistry
    ModelRegistry(Path(arg)).import_gguf(Path(sys.argv[4]), "warm-up")  # modules loaded, caches filled
    run = lambda: ModelRegistry(Path(arg)).import_gguf(Path(sys.argv[3]), "hostile")
else:
    run = lambda: validate_chat_template(template, "hostile-model")
validate_chat_template("{{ messages[0].content }}", "warm-up")
before, start = peak_mb(), time.perf_counter()
try:
    run()
    outcome = {"error": None}
except WrenError as exc:
    outcome = {"error": type(exc).__name__, "message": str(exc)}
outcome["seconds"] = time.perf_counter() - start
outcome["grew_mb"] = peak_mb() - before
print(json.dumps(outcome))
"""

GREW_MB = 150  # before the limit on what a template builds: 420-1550 MB here, 3.1-3.5 GB reported


def _run_child(*args: str, template: str = "") -> dict:
    proc = subprocess.run([sys.executable, "-c", CHILD, *args], input=template, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.serial  # a wall-clock bound: runs with the machine to itself (make test)
@pytest.mark.parametrize("name", list(PILING_UP))
def test_templates_that_pile_up_values_fail_fast_and_small(name):
    outcome = _run_child("validate", "-", template=PILING_UP[name])
    assert outcome["error"] == "ChatTemplateLimit", outcome
    assert "builds more than" in outcome["message"] and "in all" in outcome["message"], outcome["message"]
    assert outcome["message"].startswith("hostile-model: "), outcome["message"]
    assert outcome["seconds"] < 2.0, outcome
    assert outcome["grew_mb"] < GREW_MB, outcome


def test_an_import_of_a_model_whose_template_piles_up_is_refused_small(tiny_gguf, tmp_path):
    source, _ = tiny_gguf(meta={"tokenizer.chat_template": PILING_UP["slices"]})
    good, _ = tiny_gguf()
    outcome = _run_child("import", str(tmp_path / "models"), str(source), str(good))
    assert outcome["error"] == "ChatTemplateLimit", outcome
    assert "builds more than" in outcome["message"], outcome["message"]
    assert outcome["grew_mb"] < GREW_MB, outcome
    assert [p.name for p in (tmp_path / "models").iterdir() if not p.name.endswith(".lock")] == ["warm-up"]


# --- real templates on long conversations are not limited ----------------------------------------

# the "is this the last user turn?" check per message: each pass picks from the rest of the
# conversation, which counts the whole conversation again and again
LAST_USER = """{%- for m in messages -%}
{%- set later_users = messages[loop.index:] | selectattr('role', 'equalto', 'user') | list -%}
<|{{ m.role }}|>{{ m.content | trim }}{% if m.role == 'user' and later_users | length == 0 %} (last){% endif %}
{% endfor -%}
{%- if add_generation_prompt %}<|assistant|>{% endif %}"""

# a system prompt gathered in a namespace, thinking stripped from each assistant turn
GATHERING = """{%- set ns = namespace(system='', turns=[]) -%}
{%- for m in messages -%}
{%- if m.role == 'system' %}{% set ns.system = ns.system + m.content + '\\n' %}
{%- else %}{% set text = m.content.split('</think>')[-1].lstrip('\\n') if m.role == 'assistant' else m.content %}
{%- set ns.turns = ns.turns + [m.role ~ ': ' ~ text] %}{% endif -%}
{%- endfor -%}
{{ ns.system }}{{ ns.turns | join('\\n') }}"""


def _conversation(turns: int, chars: int) -> list[dict[str, str]]:
    text = ("lorem ipsum dolor sit amet " * (chars // 27 + 1))[:chars]
    messages = [{"role": "system", "content": "Be brief. " * 20}]
    for i in range(turns):
        messages.append({"role": "user", "content": f"{i}: {text}"})
        messages.append({"role": "assistant", "content": f"<think>{text[:50]}</think>\n{text}"})
    return messages


@pytest.mark.parametrize("template", [LAST_USER, GATHERING], ids=["last-user", "gathering"])
def test_real_templates_on_long_conversations_render_unchanged(template):
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    variables = {"messages": _conversation(200, 1000), "add_generation_prompt": True}
    expected = env.from_string(template).render(variables)
    assert len(expected) > 400_000
    assert render_limited(compile_chat_template(template), variables, seconds=30) == expected


def test_the_limit_on_what_is_built_grows_with_the_conversation():
    """A template that builds a few copies of a long conversation is within the limit, which
    is counted from the render's inputs as the size limit is."""
    template = "{% for m in messages %}{{ (m.content ~ ' ') * 3 }}{{ m.content.upper()|trim }}{% endfor %}"
    variables = {"messages": _conversation(400, 5000)}
    expected = jinja2.Environment().from_string(template).render(variables)
    assert render_limited(compile_chat_template(template), variables, seconds=30) == expected
