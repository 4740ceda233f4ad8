"""Chat templates, run as the bounded code they are: jinja2's sandbox, with a clock, size
limits on every value a template builds and on what it builds in all (engine.tokenize renders
prompts through it; model imports validate templates with it)."""

from __future__ import annotations

import functools
import itertools
import json
import re
import string
import threading
import time
import types
from collections.abc import ItemsView, KeysView, ValuesView
from datetime import datetime
from typing import Any

import jinja2
from jinja2 import nodes
from jinja2.compiler import CodeGenerator
from jinja2.ext import loopcontrols
from jinja2.filters import make_attrgetter, sync_do_join
from jinja2.runtime import Macro, Namespace, markup_join, str_join
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.utils import pass_environment, pass_eval_context

from .errors import ModelFileError

# A chat template is code from the model file. jinja2's sandbox keeps it from reaching Python's
# internals, but not from spending minutes in a loop or gigabytes on a string, so rendering is
# bounded too: a wall-clock limit checked at every loop step and call, and a size limit on every
# value the template builds (checked *before* a repetition, padding or join allocates it) and on
# the output. Past either, the render stops with ChatTemplateLimit.
#
# Values within the size limit can still pile up: a loop that keeps a 1 MB copy in a namespace on
# each pass, or a thousand `{% set %}`s, reached 3 GB before the clock stopped it. So a render
# also counts what it builds in all (strings by length, containers by their measured size, slices
# by length), and stops past BUILT_FACTOR times its size limit: memory stays tens of MB, while a
# real template builds a few times its prompt.

TEMPLATE_SECONDS = 2.0
# A prompt may hold the whole conversation: the output limit is this plus 4x the input's text.
TEMPLATE_BASE_CHARS = 1 << 20
BUILT_FACTOR = 16
_SLOT_CHARS = 4  # a container's slot, as _measure counts the least item
_DICTS = frozenset({dict, Namespace})
_MAX_INT_BITS = 1 << 16  # ~20,000 digits: more than any prompt prints, far below a slow multiply
_SAMPLE_CONVERSATION = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "Hello! What can you do?"},
    {"role": "assistant", "content": "I can answer questions and help you write."},
    {"role": "user", "content": "Tell me a short joke."},
]


class ChatTemplateLimit(ModelFileError):
    """The model's chat template ran past the time or size limit: a broken or hostile file."""


class _TemplateRaised(jinja2.TemplateError):
    """raise_exception() in a template: it refuses the conversation on purpose."""


# Everything a template's own code can raise; anything else is a fault in Wren.
TEMPLATE_FAULTS = (jinja2.TemplateError, TypeError, LookupError, AttributeError, ValueError, ArithmeticError)


def fault_text(exc: BaseException) -> str:
    return (exc.message if isinstance(exc, jinja2.TemplateError) else None) or str(exc) or type(exc).__name__


class _Budget:
    """One render's limits. The size limit is `base` plus 4x the text of the template's
    inputs; the inputs are measured only once something outgrows `base`, which a normal
    render never does."""

    def __init__(self, seconds: float, base: int, inputs: Any = None) -> None:
        self.seconds, self.base, self.chars, self._inputs = seconds, base, base, inputs
        self.deadline = time.monotonic() + seconds
        # characters through {{ }} anywhere, macros and blocks included: a legitimate
        # template prints each message once or twice, or a few times through nested macros
        self.printed = 0
        # characters of values built so far, anything kept included (see built())
        self.built_chars = 0

    def limit(self) -> int:
        if self._inputs is not None:
            self.chars = self.base + 4 * _measure(self._inputs, 1 << 62)[0]
            self._inputs = None
        return self.chars

    def tick(self) -> None:
        if time.monotonic() > self.deadline:
            raise ChatTemplateLimit(f"the model's chat template took longer than {self.seconds:g} s to render")

    def size(self, n: int, what: str) -> None:
        if n > self.chars and n > self.limit():
            raise ChatTemplateLimit(
                f"the model's chat template builds {what} of {n} characters or more, past Wren's limit of {self.chars}"
            )

    def value(self, value: Any, what: str = "a value", *, new: bool = False) -> Any:
        """Check `value`'s size; with `new`, also count it as built (a call's or filter's result)."""
        n = _measure(value, self.chars)[0]
        if n > self.chars and self._inputs is not None:
            self.limit()
            n = _measure(value, self.chars)[0]
        self.size(n, what)
        if new:
            # a list of dicts (messages or tools picked by selectattr, sort, unique...) holds
            # references: a dict is counted where it is made, by dict() or a display
            kind = type(value)
            shallow = (kind is list or kind is tuple) and set(map(type, value)) <= _DICTS
            self.built(_SLOT_CHARS * len(value) if shallow else n)
        return value

    def built(self, n: int) -> None:
        """Count `n` more characters built: past BUILT_FACTOR times the size limit, however
        little of it is alive, the template is refused (what it keeps is never measured)."""
        self.built_chars += n
        if self is not _NO_DEADLINE and self.built_chars > BUILT_FACTOR * self.chars and self.built_chars > BUILT_FACTOR * self.limit():
            raise ChatTemplateLimit(
                f"the model's chat template builds more than {BUILT_FACTOR * self.chars} characters of "
                f"values in all ({BUILT_FACTOR} times its size limit), which bounds its memory"
            )


# Renders are per thread (one tokenizer serves several); outside render_limited only the
# size limits apply.
_local = threading.local()
_NO_DEADLINE = _Budget(float("inf"), TEMPLATE_BASE_CHARS)


def _budget() -> _Budget:
    return getattr(_local, "budget", None) or _NO_DEADLINE


_MAX_NESTING = 256
_WALKED = (list, tuple, dict, set, frozenset, Namespace, KeysView, ValuesView, ItemsView)
_PLAIN_WALKED = frozenset({list, tuple, dict, set, frozenset, Namespace})
_SCALARS = frozenset({float, bool, type(None)})
_STR, _INT = frozenset({str}), frozenset({int})


def _measure(value: Any, limit: int) -> tuple[int, int, int]:
    """(about len(str(value)), container items, nesting depth), counting no further than just
    past `limit`. Each container is measured once (by identity), so a list that holds another
    twice per level, 2^100 items when printed, is measured in 100 steps; a value holding
    itself counts as past the limit."""
    kind = type(value)
    if kind is str:
        return len(value), 0, 0
    if kind not in _PLAIN_WALKED and not isinstance(value, _WALKED):
        return _scalar_size(value), 0, 0
    return _walk(value, 0, limit, {}, _budget())


def _walk(obj: Any, level: int, limit: int, memo: dict, budget: _Budget) -> tuple[int, int, int]:
    if level > _MAX_NESTING:
        raise ChatTemplateLimit(f"the model's chat template nests values more than {_MAX_NESTING} deep")
    key = id(obj)
    known = memo.get(key)
    if known is not None:
        return known
    kind = type(obj)
    if kind is dict:  # a message: string keys and values, measured in C
        if set(map(type, obj)) <= _STR and set(map(type, obj.values())) <= _STR:
            memo[key] = result = (2 + sum(map(len, obj)) + sum(map(len, obj.values())) + 8 * len(obj), 2 * len(obj), 1)
            return result
    elif kind is list or kind is tuple:  # flat lists of one scalar type are measured in C
        kinds = set(map(type, obj))
        if kinds <= _STR:
            memo[key] = result = (2 + sum(map(len, obj)) + 4 * len(obj), len(obj), 1)
            return result
        if kinds <= _INT:
            memo[key] = result = (2 + sum(map(int.bit_length, obj)) // 3 + 4 * len(obj), len(obj), 1)
            return result
    memo[key] = (limit + 1, limit + 1, level)  # while in progress: a cycle is too big
    if kind is Namespace:
        obj = obj._Namespace__attrs  # type: ignore[attr-defined]
    elements = itertools.chain.from_iterable(obj.items()) if isinstance(obj, dict) else obj
    chars, items, depth = 2, 0, 0
    for element in elements:
        kind = type(element)
        if kind is str:
            chars += len(element) + 4  # quotes and a separator
        elif kind is int:
            chars += element.bit_length() // 3 + 4
        elif kind in _PLAIN_WALKED or (kind not in _SCALARS and isinstance(element, _WALKED)):
            c, i, d = _walk(element, level + 1, limit, memo, budget)
            chars, items, depth = chars + c + 2, items + i, max(depth, d)
        else:
            chars += _scalar_size(element) + 2
        items += 1
        if chars > limit or items > limit:
            break
        if not items & 4095:
            budget.tick()
    memo[key] = result = (chars, items, depth + 1)
    return result


def _scalar_size(value: Any) -> int:
    if type(value) is int:
        return value.bit_length() // 3 + 2
    if isinstance(value, str):
        return len(value)
    if isinstance(value, (bytes, bytearray)):
        return 4 * len(value) + 3
    if isinstance(value, bool) or value is None:
        return 5
    if isinstance(value, int):
        return value.bit_length() // 3 + 2
    if isinstance(value, float):
        return 24
    if isinstance(value, jinja2.Undefined):
        return 0
    return 64  # a loop, cycler, macro or iterator: its repr is short


def _size(value: Any) -> int:
    return _measure(value, _budget().chars)[0]


def _total_size(values: Any, extra_each: int = 0) -> int:
    """The summed sizes of `values` (plus `extra_each` per value), stopping once past the limit."""
    limit = _budget().chars
    total = -extra_each
    for value in values:
        total += extra_each + (len(value) if type(value) is str else _measure(value, limit)[0])
        if total > limit:
            break
    return max(total, 0)


def _largest_size(values: Any) -> int:
    limit = _budget().chars
    return max((_measure(v, limit)[0] for v in values), default=0)


def _int_arg(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


class _GuardedCodeGenerator(CodeGenerator):
    """jinja2's code generator with four hooks: every for-loop iterates through
    environment.wren_loop (which watches the clock), every `~` goes through
    environment.wren_concat, list, tuple and dict displays through
    environment.wren_value (both check the size), and every slice's copy through
    environment.wren_slice (which counts it)."""

    def visit_For(self, node: nodes.For, frame: Any) -> None:
        guarded = nodes.Call(nodes.EnvironmentAttribute("wren_loop"), [node.iter], [], None, None,
                             lineno=node.lineno)
        super().visit_For(nodes.For(node.target, guarded, node.body, node.else_, node.test, node.recursive,
                                    lineno=node.lineno), frame)

    def visit_Getitem(self, node: nodes.Getitem, frame: Any) -> None:
        if isinstance(node.arg, nodes.Slice):  # compiled to a plain subscript: a copy to count
            self.write("environment.wren_slice(")
            super().visit_Getitem(node, frame)
            self.write(")")
        else:
            super().visit_Getitem(node, frame)

    def visit_Concat(self, node: nodes.Concat, frame: Any) -> None:
        self.write("environment.wren_concat((")
        for arg in node.nodes:
            self.visit(arg, frame)
            self.write(", ")
        self.write("), context.eval_ctx.autoescape)")

    def _guarded_display(self, visit: Any, node: nodes.Expr, frame: Any) -> None:
        self.write("environment.wren_value(")
        visit(self, node, frame)
        self.write(")")

    def visit_List(self, node: nodes.List, frame: Any) -> None:
        self._guarded_display(CodeGenerator.visit_List, node, frame)

    def visit_Dict(self, node: nodes.Dict, frame: Any) -> None:
        self._guarded_display(CodeGenerator.visit_Dict, node, frame)

    def visit_Tuple(self, node: nodes.Tuple, frame: Any) -> None:
        if node.ctx == "load":
            self._guarded_display(CodeGenerator.visit_Tuple, node, frame)
        else:  # an assignment target: `{% for a, b in ... %}`
            super().visit_Tuple(node, frame)


class _ChatTemplateEnvironment(ImmutableSandboxedEnvironment):
    """HF's chat-template dialect (trim_blocks, lstrip_blocks, loop controls, raise_exception,
    strftime_now, a tojson that keeps non-ASCII) in an immutable sandbox with limits."""

    code_generator_class = _GuardedCodeGenerator
    intercepted_binops = frozenset({"+", "*", "**", "%"})

    def __init__(self) -> None:
        super().__init__(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols], finalize=_finalize)
        # joins every buffered block: macros, {% set %} blocks, filters (jinja2 declares concat as a
        # class attribute, "".join, which mypy reads as a method; the environment reads it per instance)
        self.concat = _bounded_join  # type: ignore[method-assign]
        self.globals.pop("lipsum", None)  # generates text to order; no chat template needs it
        self.globals["raise_exception"] = _raise_exception
        self.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
        self.filters["tojson"] = _tojson
        self.filters["join"] = _join
        self.filters["sum"] = _sum
        for name in ("urlize", "xmlattr", "pprint"):  # HTML/debug output, unbounded in size
            self.filters[name] = _unavailable(name)
        self.filters = {name: _guard_filter(name, func) for name, func in self.filters.items()}

    # the hooks the generated code calls
    def wren_loop(self, iterable: Any) -> Any:
        budget = _budget()
        for item in iterable:
            budget.tick()
            yield item

    def wren_value(self, value: Any) -> Any:
        # a display's items were counted where they were built: count its slots only
        _budget().built(_built_size(value))
        return _budget().value(value, "a list or dict")

    def wren_concat(self, parts: tuple, autoescape: bool) -> str:
        budget = _budget()
        size = _total_size(parts)
        budget.size(size, "a string")
        budget.built(size)
        return markup_join(parts) if autoescape else str_join(parts)

    def wren_slice(self, result: Any) -> Any:
        _budget().built(_built_size(result))
        return result

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        if operator == "+" and type(left) is str and type(right) is str:  # the common case, kept fast
            budget = _budget()
            if len(left) + len(right) > budget.chars:
                budget.size(len(left) + len(right), "a string")
            budget.built(len(left) + len(right))
            return left + right
        result = self._checked_binop(context, operator, left, right)
        _budget().built(_built_size(result))
        return result

    def _checked_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        budget = _budget()
        if operator == "*":
            for seq, times in ((left, right), (right, left)):
                if isinstance(seq, (str, list, tuple)) and isinstance(times, int):
                    budget.size(_size(seq) * max(times, 0), "a repeated string or list")
            if isinstance(left, int) and isinstance(right, int):
                _int_bits(left.bit_length() + right.bit_length())
        elif operator == "+":
            if isinstance(left, str) and isinstance(right, str):
                budget.size(len(left) + len(right), "a string")
            elif isinstance(left, (list, tuple)) and isinstance(right, (list, tuple)):
                # lengths only: the items are references to values already checked, and
                # anything that prints the result measures it then
                budget.size(len(left) + len(right), "a list")
        elif operator == "**":
            if isinstance(left, int) and isinstance(right, int) and right > 0 and abs(left) > 1:
                _int_bits(left.bit_length() * right)
        elif operator == "%" and isinstance(left, str):
            _check_percent_format(left, right)
        return super().call_binop(context, operator, left, right)

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        budget = _budget()
        budget.tick()  # a macro calling itself twice makes 2^depth calls without a loop
        if isinstance(__obj, Macro) and (__obj.catch_varargs or __obj.catch_kwargs):
            budget.value((args, kwargs), "macro arguments")
        elif isinstance(__obj, types.BuiltinMethodType):
            args = _check_builtin_method(budget, __obj, args, kwargs)
        result = super().call(__context, __obj, *args, **kwargs)
        return budget.value(result, "a call's result", new=True)

    def wrap_str_format(self, value: Any) -> Any:
        wrapped = super().wrap_str_format(value)
        if wrapped is None:
            return None
        template = value.__self__

        def checked(*args: Any, **kwargs: Any) -> str:
            values = list(args) + (list(args[0].values()) if value.__name__ == "format_map" and args
                                   and isinstance(args[0], dict) else list(kwargs.values()))
            largest = _largest_size(values)
            budget, size = _budget(), len(template)
            for n, (_text, field, spec, _conv) in enumerate(string.Formatter().parse(template)):
                if field is None:
                    continue
                if spec and "{" in spec:
                    raise jinja2.TemplateError("format specs taken from arguments are not supported")
                size += largest + max((int(d) for d in re.findall(r"\d+", spec or "")), default=0)
                budget.size(size, "a formatted string")
                if not n % 1024:
                    budget.tick()
            return wrapped(*args, **kwargs)

        return functools.update_wrapper(checked, wrapped)




def _built_size(value: Any) -> int:
    """What a new value adds when its items are references to values already counted (an
    operator's result, a slice, a display): a string's length, a container's slots, or a
    number's digits."""
    if isinstance(value, (str, bytes)):
        return len(value)
    if isinstance(value, (list, tuple, dict)):
        return _SLOT_CHARS * len(value)
    return _scalar_size(value) if type(value) is int else 1


def _int_bits(bits: int) -> None:
    if bits > _MAX_INT_BITS:
        raise ChatTemplateLimit(
            f"the model's chat template computes a number of about {bits} bits, past Wren's limit of {_MAX_INT_BITS}"
        )


_PERCENT_SPEC = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(\*|\d+)?(?:\.(\*|\d+))?[hlL]?([a-zA-Z%])")


def _check_percent_format(template: str, args: Any) -> None:
    values = list(args.values()) if isinstance(args, dict) else list(args) if isinstance(args, tuple) else [args]
    largest = _largest_size(values)
    budget, size = _budget(), len(template)
    for n, match in enumerate(_PERCENT_SPEC.finditer(template)):
        width, precision = match.group(1) or "0", match.group(2) or "0"
        if "*" in (width, precision):
            raise jinja2.TemplateError("'%' formats taking their width from an argument are not supported")
        size += largest + int(width) + int(precision)
        budget.size(size, "a formatted string")
        if not n % 1024:
            budget.tick()


def _check_builtin_method(budget: _Budget, method: Any, args: tuple, kwargs: dict) -> tuple:
    """Refuse, before it runs, a str/bytes/int method whose result would be past the limit."""
    owner, name = getattr(method, "__self__", None), getattr(method, "__name__", "")

    def arg(index: int, key: str, default: Any) -> Any:
        return args[index] if len(args) > index else kwargs.get(key, default)

    if isinstance(owner, (str, bytes)):
        n = len(owner)
        if name in ("center", "ljust", "rjust", "zfill"):
            budget.size(_int_arg(arg(0, "width", 0)), "a padded string")
        elif name == "expandtabs":
            tabs = owner.count("\t") if isinstance(owner, str) else owner.count(b"\t")
            budget.size(n + tabs * _int_arg(arg(0, "tabsize", 8)), "a string")
        elif name == "replace" and len(args) >= 2:
            old, new = args[0], args[1]
            count = _int_arg(arg(2, "count", -1)) if len(args) > 2 or "count" in kwargs else -1
            if isinstance(old, type(owner)) and isinstance(new, type(owner)):
                hits = n + 1 if not old else _occurrences(owner, old)
                budget.size(n + (min(hits, count) if count >= 0 else hits) * len(new), "a string")
        elif name == "join" and args:
            items = list(args[0])
            budget.size(_total_size(items, n), "a joined string")
            args = (items, *args[1:])
        elif name == "translate" and args and isinstance(args[0], dict):
            longest = max((len(v) for v in args[0].values() if isinstance(v, str)), default=1)
            budget.size(n * max(longest, 1), "a translated string")
    elif isinstance(owner, int) and name == "to_bytes":
        budget.size(_int_arg(arg(0, "length", 1)), "a byte string")
    return args


def _finalize(value: Any) -> Any:
    """Every {{ value }} passes here before str(): a list printed is measured first, and the
    total printed is bounded, since a macro's buffered output reaches the render's output
    count only when the macro returns."""
    budget = _budget()
    if type(value) is str:
        size = len(value)
        budget.size(size, "output")
    else:
        size = _measure(budget.value(value, "output"), budget.chars)[0]
    if budget is _NO_DEADLINE:  # a constant finalized while compiling
        return value
    budget.printed += size
    if budget.printed > 8 * budget.chars and budget.printed > 8 * budget.limit():
        raise ChatTemplateLimit(
            f"the model's chat template prints more than {8 * budget.chars} characters, counting "
            "what its macros and blocks print"
        )
    return value


def _occurrences(owner: str | bytes, part: str | bytes) -> int:
    """How often `part` occurs in `owner` (both text or both bytes; a mix never occurs)."""
    if isinstance(owner, str) and isinstance(part, str):
        return owner.count(part)
    if isinstance(owner, bytes) and isinstance(part, bytes):
        return owner.count(part)
    return 0


def _bounded_join(parts: Any) -> str:
    parts = list(parts)
    _budget().size(sum(map(len, parts)), "a block of output")
    return "".join(parts)


def _raise_exception(message: str) -> None:
    raise _TemplateRaised(message)


def _unavailable(name: str) -> Any:
    def refuse(*_args: Any, **_kwargs: Any) -> None:
        raise jinja2.TemplateError(f"the {name} filter is not available in chat templates")

    return refuse


# Filters whose output can be far larger than their input, keyed to a check of their arguments.
def _pre_center(b: _Budget, value: Any, width: Any = 80) -> None:
    b.size(_int_arg(width), "a padded string")


def _pre_indent(b: _Budget, s: Any, width: Any = 4, *_: Any, **_kw: Any) -> None:
    text = str(s)
    per_line = len(width) if isinstance(width, str) else _int_arg(width)
    b.size(len(text) + (text.count("\n") + 1) * per_line, "an indented string")


def _pre_replace(b: _Budget, s: Any, old: Any = "", new: Any = "", count: Any = None) -> None:
    text, old, new = str(s), str(old), str(new)
    hits = len(text) + 1 if not old else text.count(old)
    if isinstance(count, int) and count >= 0:
        hits = min(hits, count)
    b.size(len(text) + hits * len(new), "a string")


def _pre_wordwrap(b: _Budget, s: Any, width: Any = 79, break_long_words: Any = True, wrapstring: Any = None,
                  *_: Any, **_kw: Any) -> None:
    text = str(s)
    b.size(len(text) * (1 + len(str(wrapstring or "\n"))), "a wrapped string")


def _pre_count(b: _Budget, value: Any, count: Any = 0, *_: Any, **_kw: Any) -> None:
    b.size(_int_arg(count), "a list")


def _pre_format(b: _Budget, value: Any, *args: Any, **kwargs: Any) -> None:
    _check_percent_format(str(value), kwargs if kwargs else tuple(args))


_PRECHECKS: dict[str, Any] = {
    "center": _pre_center, "indent": _pre_indent, "replace": _pre_replace, "wordwrap": _pre_wordwrap,
    "batch": _pre_count, "slice": _pre_count, "format": _pre_format,
}


def _guard_filter(name: str, func: Any) -> Any:
    """Check a filter's arguments (sizes; the amplifiers' estimates) before it runs and its
    result after; the clock is checked at each call."""
    passes_context = getattr(func, "jinja_pass_arg", None) is not None
    precheck = _PRECHECKS.get(name)

    @functools.wraps(func)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        budget = _budget()
        budget.tick()
        values = args[1:] if passes_context else args
        for value in (*values, *kwargs.values()):
            budget.value(value, f"the input of the {name} filter")
        if precheck is not None:
            precheck(budget, *values, **kwargs)
        return budget.value(func(*args, **kwargs), f"the output of the {name} filter", new=True)

    return guarded


@pass_eval_context
def _join(eval_ctx: Any, value: Any, d: str = "", attribute: Any = None) -> str:
    items = list(value) if attribute is None else list(map(make_attrgetter(eval_ctx.environment, attribute), value))
    _budget().size(_total_size(items, len(str(d))), "a joined string")
    return sync_do_join(eval_ctx, items, d)


@pass_environment
def _sum(environment: Any, iterable: Any, attribute: Any = None, start: Any = 0) -> Any:
    items = iterable if attribute is None else map(make_attrgetter(environment, attribute), iterable)
    total = start
    for item in items:
        _budget().tick()  # summing lists copies the total each step
        total = environment.call_binop(None, "+", total, item)
    return total


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | str | None = None,
            separators: tuple[str, str] | None = None, sort_keys: bool = False) -> str:
    budget = _budget()
    chars, items, depth = _measure(value, budget.chars)
    per_item = len(indent) if isinstance(indent, str) else _int_arg(indent)
    extra = sum(len(str(s)) for s in separators) if separators else 2
    budget.size(chars + items * (depth * per_item + extra + 1), "JSON")
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def compile_chat_template(source: str) -> jinja2.Template:
    """Compile a chat template for render_limited (jinja2.TemplateError if it is invalid)."""
    try:
        return _ChatTemplateEnvironment().from_string(source)
    except RecursionError:
        raise jinja2.TemplateError("it nests too deeply") from None


def render_limited(template: jinja2.Template, variables: dict[str, Any], *,
                   seconds: float = TEMPLATE_SECONDS, base_chars: int = TEMPLATE_BASE_CHARS) -> str:
    """Render a compiled chat template within `seconds` and an output of `base_chars` plus 4x
    the text of `variables` (ChatTemplateLimit past either)."""
    budget = _Budget(seconds, base_chars, variables)
    previous = getattr(_local, "budget", None)
    _local.budget = budget
    try:
        pieces, total = [], 0
        for piece in template.generate(variables):
            total += len(piece)
            if total > budget.chars and total > budget.limit():
                raise ChatTemplateLimit(
                    f"the model's chat template produced more than {budget.chars} characters of prompt"
                )
            budget.tick()
            pieces.append(piece)
        return "".join(pieces)
    except RecursionError:
        raise ChatTemplateLimit("the model's chat template recursed too deeply") from None
    except MemoryError:
        raise ChatTemplateLimit("the model's chat template ran out of memory") from None
    finally:
        _local.budget = previous


def validate_chat_template(template: str, name: str) -> None:
    """Render `template` once on a sample conversation (system, user, assistant, user; then
    without the system turn, which some templates refuse) within the limits; ModelFileError,
    naming the model `name`, if it is invalid, too slow, too large or leaves its sandbox."""
    try:
        compiled = compile_chat_template(template)
    except TEMPLATE_FAULTS as exc:
        raise ModelFileError(f"the chat template of {name} is invalid: {fault_text(exc)}") from exc
    except ChatTemplateLimit as exc:  # a constant printed past the limit, found while compiling
        raise ChatTemplateLimit(f"{name}: {exc}") from exc
    variables = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>",
                 "tools": None, "add_generation_prompt": True}
    failure: BaseException | None = None
    for messages in (_SAMPLE_CONVERSATION, _SAMPLE_CONVERSATION[1:]):
        try:
            render_limited(compiled, {**variables, "messages": messages})
            return
        except ChatTemplateLimit as exc:
            raise ChatTemplateLimit(f"{name}: {exc}") from exc
        except jinja2.exceptions.SecurityError as exc:
            raise ModelFileError(
                f"the chat template of {name} reaches outside its sandbox: {fault_text(exc)}"
            ) from exc
        except TEMPLATE_FAULTS as exc:
            failure = failure or exc
    assert failure is not None
    raise ModelFileError(
        f"the chat template of {name} fails on a plain conversation: {fault_text(failure)}"
    ) from failure
