"""Chat templates are code from the model file: jinja2's sandbox keeps them inside, and
Wren's limits keep them quick and small. Hostile templates fail within 3 s, with a clear
ModelFileError and bounded memory; real templates render exactly as jinja2 renders them."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path

import jinja2
import pytest
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import AddedToken, models, pre_tokenizers
from tokenizers import Tokenizer as RawTokenizer

from wren.engine.chat_template import ChatTemplateLimit, compile_chat_template, render_limited, validate_chat_template
from wren.engine.errors import InvalidRequest, ModelFileError
from wren.engine.tokenize import Tokenizer

CHATML = (
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SAMPLE = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
          {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "A joke?"}]
TOOLS = [{"type": "function", "function": {"name": "weather", "description": "Weather now", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


# --- hostile templates, run in a child process with a 3 GB address-space limit ----------------
# (a regression then fails these tests with a MemoryError in the child instead of taking the
# test machine's memory)

HOSTILE = {
    # escapes: the sandbox holds, and the import says what the template tried
    "mro": ("{{ ''.__class__.__mro__[1].__subclasses__() }}", r"reaches outside its sandbox: access to attribute '__class__'"),
    "globals": ("{{ cycler.__init__.__globals__ }}", r"reaches outside its sandbox: access to attribute '__init__'"),
    "format-escape": ("{{ '{0.__class__.__mro__}'.format('') }}", r"reaches outside its sandbox"),
    # time
    "range": ("{% for x in range(10**10) %}{% endfor %}", r"fails on a plain conversation: Range too big"),
    "nested-loops": ("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
                     r"took longer than 2 s to render"),
    "macro-fork": ("{% macro f(n) %}{% if n %}{{ f(n-1) }}{{ f(n-1) }}{% endif %}{% endmacro %}{{ f(60) }}",
                   r"took longer than 2 s to render"),
    "recursion": ("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", r"recursed too deeply"),
    "big-power": ("{{ 3 ** 100000000 }}", r"computes a number of about 200000000 bits"),
    # memory
    "repeat": ("{{ 'a' * 10**10 }}", r"builds a repeated string or list of 10000000000 characters"),
    "doubling": ("{% set s = namespace(v='a') %}{% for i in range(100) %}{% set s.v = s.v ~ s.v %}{% endfor %}{{ s.v }}",
                 r"builds a string of \d+ characters or more, past Wren's limit"),
    "plus-doubling": ("{% set s = namespace(v='a') %}{% for i in range(100) %}{% set s.v = s.v + s.v %}{% endfor %}",
                      r"builds a string of \d+ characters"),
    "list-repeat": ("{{ ((range(100000)|list) * 100000)|length }}", r"builds a repeated string or list"),
    "output-loop": ("{% for i in range(100000) %}{% for j in range(100000) %}xxxxxxxxxx{% endfor %}{% endfor %}",
                    r"produced more than \d+ characters|took longer"),
    "macro-buffer": ("{% macro m() %}{% for i in range(100000) %}{{ 'a' * 100000 }}{% endfor %}{% endmacro %}{{ m() }}",
                     r"prints more than \d+ characters, counting what its macros and blocks print"),
    "set-block": ("{% set x %}{% for i in range(100000) %}{{ 'a' * 100000 }}{% endfor %}{% endset %}",
                  r"prints more than \d+ characters"),
    "shared-lists": ("{% set ns = namespace(a=[0]) %}{% for i in range(100) %}{% set ns.a = [ns.a, ns.a] %}{% endfor %}{{ ns.a }}",
                     r"builds a list or dict of \d+ characters"),
    "shared-namespaces": ("{% set ns = namespace(v=[0]) %}{% for i in range(100) %}{% set n = namespace() %}"
                          "{% set n.a = ns.v %}{% set n.b = ns.v %}{% set ns.v = n %}{% endfor %}{{ ns.v|string }}",
                          r"builds the input of the string filter of \d+ characters"),
    "compare-shared": ("{% set ns = namespace(a=[0], b=[0]) %}{% for i in range(100) %}{% set ns.a = [ns.a, ns.a] %}"
                       "{% set ns.b = [ns.b, ns.b] %}{% endfor %}{{ ns.a == ns.b }}", r"builds a list or dict"),
    "cycle": ("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}", r"builds output of \d+ characters"),
    "deep": ("{% set ns = namespace(a=0) %}{% for i in range(5000) %}{% set ns.a = [ns.a] %}{% endfor %}",
             r"nests values more than 256 deep"),
    "ljust": ("{{ 'a'.ljust(10**10) }}", r"builds a padded string of 10000000000"),
    "center": ("{{ 'a'|center(10**10) }}", r"builds a padded string of 10000000000"),
    "str-format": ("{{ '{:>10000000000}'.format(1) }}", r"builds a formatted string"),
    "format-repeat": ("{{ ('{0}' * 300000).format('a' * 100000) }}", r"builds a formatted string"),
    "percent": ("{{ '%10000000000s' % 'a' }}", r"builds a formatted string"),
    "format-filter": ("{{ '%10000000000s'|format('a') }}", r"builds a formatted string"),
    "join": ("{{ range(100000)|join('a' * 100000) }}", r"builds a joined string"),
    "str-join": ("{{ ('b' * 100000).join(['a'] * 100000) }}", r"builds a joined string"),
    "sum": ("{{ ([[1]*1000]*100000)|sum(start=[]) }}", r"builds a repeated string or list"),
    "batch": ("{{ [1]|batch(10**9, fill_with=0)|list }}", r"builds a list of 1000000000"),
    "replace": ("{{ ('a' * 100000)|replace('', 'b' * 100000) }}", r"builds a string of 10000200000"),
    "str-replace": ("{{ ('a' * 100000).replace('a', 'b' * 100000) }}", r"builds a string of 10000100000"),
    "translate": ("{{ ('a' * 100000).translate({97: 'b' * 100000}) }}", r"builds a translated string"),
    "expandtabs": ("{{ ('\t' * 100000).expandtabs(100000) }}", r"builds a string of 10000100000"),
    "tojson": ("{{ [[[[[[[[[[1]]]]]]]]]]|tojson(indent=10**8) }}", r"builds JSON of \d+ characters"),
    "indent": ("{{ ('\n' * 100000)|indent(100000) }}", r"builds an indented string"),
    "to-bytes": ("{{ (1).to_bytes(10**10, 'big') }}", r"builds a byte string of 10000000000"),
    "lipsum": ("{{ lipsum(10**6) }}", r"'lipsum' is undefined"),
    "urlize": ("{{ 'http://x'|urlize }}", r"the urlize filter is not available in chat templates"),
}

CHILD = r"""
import json, resource, sys, time
from wren.engine.errors import ModelFileError
from wren.engine.chat_template import validate_chat_template

def peak_mb():  # the process's high-water mark: a case that allocates a lot raises it
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

validate_chat_template("{{ messages[0].content }}", "warm-up")
results = {}
for name, template in json.load(sys.stdin).items():
    before, start = peak_mb(), time.perf_counter()
    try:
        validate_chat_template(template, "hostile-model")
        outcome = {"error": None}
    except Exception as exc:
        outcome = {"error": type(exc).__name__, "model_file_error": isinstance(exc, ModelFileError), "message": str(exc)}
    outcome["seconds"] = time.perf_counter() - start
    outcome["grew_mb"] = peak_mb() - before
    results[name] = outcome
print(json.dumps(results))
"""


def _limit_memory() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))


@pytest.fixture(scope="module")
def hostile_results() -> dict:
    cases = {name: template for name, (template, _) in HOSTILE.items()}
    done = subprocess.run([sys.executable, "-c", CHILD], input=json.dumps(cases), capture_output=True, text=True,
                          timeout=240, cwd=Path(__file__).resolve().parents[2],
                          preexec_fn=_limit_memory if sys.platform != "win32" else None)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


@pytest.mark.serial  # a wall-clock bound: runs with the machine to itself (make test)
@pytest.mark.slow
@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_templates_fail_fast_and_small(hostile_results, name):
    outcome = hostile_results[name]
    assert outcome["error"] is not None, f"{name} rendered"
    assert outcome["model_file_error"], outcome
    assert "hostile-model" in outcome["message"]
    assert len(outcome["message"]) < 400
    assert re.search(HOSTILE[name][1], outcome["message"]), outcome["message"]
    assert outcome["seconds"] < 3.0, outcome
    assert outcome["grew_mb"] < 100, outcome


# --- real templates are unchanged ---------------------------------------------------------------

def reference_env() -> ImmutableSandboxedEnvironment:
    """The environment HF (and Wren before its limits) renders chat templates in."""
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = lambda v, ensure_ascii=False, indent=None, separators=None, sort_keys=False: json.dumps(
        v, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)

    def raise_exception(message: str) -> None:
        raise jinja2.TemplateError(message)

    env.globals["raise_exception"] = raise_exception
    return env


LLAMA3_LIKE = """{{- bos_token }}
{%- if messages[0]['role'] == 'system' %}{%- set system_message = messages[0]['content']|trim %}{%- set messages = messages[1:] %}
{%- else %}{%- set system_message = "" %}{%- endif %}
{{- "<|start_header_id|>system<|end_header_id|>\\n\\n" }}
{%- if tools is not none %}{{- "Environment: ipython\\n" }}{%- for t in tools %}{{- t | tojson(indent=4) }}{{- "\\n\\n" }}{%- endfor %}{%- endif %}
{{- system_message }}{{- "<|eot_id|>" }}
{%- for message in messages %}
    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' }}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}"""

MISTRAL_LIKE = """{{- bos_token }}
{%- set user_messages = messages | selectattr("role", "equalto", "user") | list %}
{%- set filtered = [] %}
{%- for message in messages %}{%- if message["role"] not in ["tool", "system"] %}{%- set filtered = filtered + [message] %}{%- endif %}{%- endfor %}
{%- for message in filtered %}{%- if (message["role"] == "user") != (loop.index0 % 2 == 0) %}{{- raise_exception("roles must alternate") }}{%- endif %}{%- endfor %}
{%- for message in filtered %}
  {%- if message["role"] == "user" %}
    {%- if tools is not none and message == user_messages[-1] %}[AVAILABLE_TOOLS]{%- for tool in tools %}{%- for key, val in tool.function.items() %}{{ key ~ '=' ~ (val if val is string else val|tojson) }}{% if not loop.last %}, {% endif %}{%- endfor %}{%- endfor %}[/AVAILABLE_TOOLS]{%- endif %}
    {{- '[INST]' + message['content'] + '[/INST]' }}
  {%- else %}{{- message['content'] + eos_token }}{%- endif %}
{%- endfor %}"""

MACROS = """{%- macro turn(role, text) -%}<|{{ role|upper }}|>{{ text|trim }}{{ '%s:%d'|format(role, text|length) }}{%- endmacro -%}
{%- set ns = namespace(count=0, roles=[]) -%}
{%- for m in messages -%}{{ turn(m.role, m.content) }}{%- set ns.count = ns.count + 1 -%}{%- set ns.roles = ns.roles + [m.role] -%}{%- endfor -%}
{{ ns.roles|join(',') }}|{{ ns.roles|unique|list|length }}|{{ '{}/{}'.format(ns.count, messages|length) }}|{{ 'ab'|center(6) }}|
{{- [[1], [2]]|sum(start=[]) }}|{{ 'a\\nb'|indent(2, true) }}|{{ 'aXb'|replace('X', 'Y') }}|{{ 'abc'.ljust(5) }}|{{ (1).to_bytes(2, 'big') }}|
{{- (messages|map(attribute='content')|list)[-1] }}|{{ {'k': [1, 2]}|tojson }}|{{ messages[:2]|tojson(indent=2) }}|{{ 2 ** 10 }}|{{ 'x' * 3 }}
{%- if add_generation_prompt %}<|ASSISTANT|>{% endif %}"""


@pytest.mark.parametrize("template", [CHATML, LLAMA3_LIKE, MISTRAL_LIKE, MACROS], ids=["chatml", "llama3", "mistral", "macros"])
@pytest.mark.parametrize("tools", [None, TOOLS], ids=["plain", "tools"])
def test_real_templates_render_as_jinja_renders_them(template, tools):
    variables = {"messages": SAMPLE[1:] if template is MISTRAL_LIKE else SAMPLE, "tools": tools,
                 "add_generation_prompt": True, "bos_token": "<s>", "eos_token": "</s>"}
    expected = reference_env().from_string(template).render(variables)
    assert render_limited(compile_chat_template(template), variables) == expected
    validate_chat_template(template, "real-model")


@pytest.mark.serial  # a wall-clock bound: runs with the machine to itself (make test)
def test_long_conversations_are_not_limited():
    """The size limit grows with the conversation: a 3 MB history renders, each message
    printed once, in well under the time limit."""
    messages = [{"role": "user" if i % 2 == 0 else "assistant", "content": "word " * 3000} for i in range(200)]
    start = time.perf_counter()
    prompt = render_limited(compile_chat_template(CHATML), {"messages": messages, "add_generation_prompt": True})
    assert len(prompt) > 3_000_000 and time.perf_counter() - start < 1.5


def test_output_past_the_limit_is_refused():
    template = compile_chat_template("{% for i in range(3000) %}{{ messages[0].content }}{% endfor %}")
    with pytest.raises(ChatTemplateLimit, match=r"produced more than 1052\d\d\d characters of prompt"):
        render_limited(template, {"messages": [{"role": "user", "content": "x" * 1000}]})  # 1 MiB + 4x the input
    literal = compile_chat_template("{% for i in range(100000) %}" + "y" * 100 + "{% endfor %}")
    with pytest.raises(ChatTemplateLimit, match=r"produced more than \d+ characters of prompt"):
        render_limited(literal, {"messages": []})


@pytest.mark.serial  # a wall-clock bound: runs with the machine to itself (make test)
def test_the_time_limit_applies_per_render_and_per_thread():
    slow = compile_chat_template("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}")
    quick = compile_chat_template(CHATML)
    rendered: list[str] = []

    def chat() -> None:
        for _ in range(50):
            rendered.append(render_limited(quick, {"messages": SAMPLE, "add_generation_prompt": True}))

    worker = threading.Thread(target=chat)
    start = time.perf_counter()
    worker.start()
    with pytest.raises(ChatTemplateLimit, match=r"took longer than 0.3 s"):
        render_limited(slow, {"messages": []}, seconds=0.3)
    worker.join()
    assert time.perf_counter() - start < 3
    assert len(rendered) == 50 and len(set(rendered)) == 1


def tiny_tokenizer(tmp_path: Path, template: str) -> Tokenizer:
    raw = RawTokenizer(models.WordLevel({"<s>": 0, "</s>": 1, "hello": 2, "[UNK]": 3}, unk_token="[UNK]"))
    raw.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    raw.add_special_tokens([AddedToken("<s>", special=True), AddedToken("</s>", special=True)])
    raw.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": template}))
    return Tokenizer.from_dir(tmp_path)


@pytest.mark.parametrize("template, kind, message", [
    ("{{ 'a' * 10**10 }}", ChatTemplateLimit, r"^the model's chat template builds a repeated string"),
    ("{% for x in range(10**10) %}{% endfor %}", InvalidRequest, r"chat template failed: Range too big"),
    ("{{ 1 / 0 }}", InvalidRequest, r"chat template failed: division by zero"),
    ("{{ '{0}'.format() }}", InvalidRequest, r"chat template failed"),
    ("{{ ''.__class__.__mro__ }}", InvalidRequest, r"chat template failed: access to attribute '__class__'"),
    ("{% for m in messages %}{{ m.content ", InvalidRequest, r"chat template is invalid"),
    ("{{ " + "(" * 5000 + " }}", InvalidRequest, r"chat template is invalid: it nests too deeply"),
])
def test_render_chat_errors(tmp_path, template, kind, message):
    """At chat time a limit is the model file's fault (ModelFileError); anything else the
    template raises is an InvalidRequest, as before; nothing escapes as a bare Python error."""
    tok = tiny_tokenizer(tmp_path, template)
    with pytest.raises(kind, match=message):
        tok.encode_chat([{"role": "user", "content": "hello"}])


def test_render_chat_and_encode_chat_still_work(tmp_path):
    tok = tiny_tokenizer(tmp_path, "{% for m in messages %}{{ m['content'] }} {% endfor %}")
    assert tok.render_chat([{"role": "user", "content": "hello"}]) == "hello "
    assert tok.encode_chat([{"role": "user", "content": "hello"}]) == [2]


GEMMA_LIKE = ("{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"
              "{% for m in messages %}<start_of_turn>{{ m['role'] }}\n{{ m['content'] }}<end_of_turn>\n{% endfor %}")


def test_validate_chat_template():
    validate_chat_template(CHATML, "m")
    validate_chat_template(GEMMA_LIKE, "m")  # refuses a system turn on purpose: retried without it
    with pytest.raises(ModelFileError, match=r"^the chat template of Broken 7B fails on a plain conversation: no roles"):
        validate_chat_template("{{ raise_exception('no roles') }}", "Broken 7B")
    with pytest.raises(ModelFileError, match=r"^the chat template of Broken 7B is invalid: Unexpected end of template"):
        validate_chat_template("{% for m in messages %}", "Broken 7B")
    with pytest.raises(ModelFileError, match=r"^the chat template of Broken 7B fails on a plain conversation: 'str object' has no attribute 'text'"):
        validate_chat_template("{{ messages[0]['content'][0]['text'].upper() }}", "Broken 7B")
    with pytest.raises(ChatTemplateLimit, match=r"^Broken 7B: the model's chat template took longer than 2 s"):
        validate_chat_template("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
                               "Broken 7B")
