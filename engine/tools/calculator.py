"""A safe arithmetic evaluator for the calculator tool: the expression is parsed with `ast`
and only numbers, arithmetic operators, a few math functions and constants are walked.
Nothing is ever passed to eval; names, attributes, calls of anything else, strings,
comprehensions and lambdas are refused. Sizes are bounded so no expression can take long.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from typing import Any

MAX_CHARS = 200  # also the schema's maxLength: a forced, constrained call closes its string within it
MAX_NODES = 200
MAX_INT_BITS = 4096  # about 1,233 decimal digits
MAX_FACTORIAL = 450


class CalcError(ValueError):
    """The expression is not one the calculator evaluates; the message says why."""


def _factorial(n: float) -> int:
    if isinstance(n, float):
        if not n.is_integer():
            raise CalcError("factorial needs a whole number")
        n = int(n)
    if n < 0:
        raise CalcError("factorial needs a number that is not negative")
    if n > MAX_FACTORIAL:
        raise CalcError(f"factorial is limited to {MAX_FACTORIAL}!")
    return math.factorial(n)


def _log(x: float, base: float | None = None) -> float:
    return math.log(x) if base is None else math.log(x, base)


FUNCTIONS: dict[str, Callable[..., int | float]] = {
    "sqrt": math.sqrt, "cbrt": lambda x: math.copysign(abs(x) ** (1 / 3), x),
    "sin": math.sin, "cos": math.cos, "tan": math.tan, "asin": math.asin, "acos": math.acos, "atan": math.atan,
    "atan2": math.atan2, "sinh": math.sinh, "cosh": math.cosh, "tanh": math.tanh,
    "exp": math.exp, "log": _log, "ln": math.log, "log10": math.log10, "log2": math.log2,
    "abs": abs, "round": round, "floor": math.floor, "ceil": math.ceil, "trunc": math.trunc,
    "min": min, "max": max, "factorial": _factorial, "hypot": math.hypot,
    "degrees": math.degrees, "radians": math.radians, "gcd": math.gcd,
}
CONSTANTS = {"pi": math.pi, "e": math.e, "tau": math.tau, "inf": math.inf}

_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
}
_SYMBOL = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%", ast.Pow: "**"}
_UNARY: dict[type[ast.unaryop], Callable[[Any], Any]] = {ast.UAdd: operator.pos, ast.USub: operator.neg}


def evaluate(expression: str) -> int | float:
    """The value of an arithmetic expression such as "2 * (3 + 4) ** 2 / sqrt(16)"."""
    if not isinstance(expression, str) or not expression.strip():
        raise CalcError("the expression is empty")
    if len(expression) > MAX_CHARS:
        raise CalcError(f"the expression is {len(expression)} characters long; the limit is {MAX_CHARS}")
    text = expression.strip().replace("^", "**").replace("×", "*").replace("÷", "/").replace("−", "-")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as exc:
        raise CalcError(f"it is not an arithmetic expression ({exc.msg})") from None
    count = sum(1 for _ in ast.walk(tree))
    if count > MAX_NODES:
        raise CalcError(f"the expression has {count} parts; the limit is {MAX_NODES}")
    try:
        return _check(_eval(tree.body))
    except ZeroDivisionError:
        raise CalcError("division by zero") from None
    except OverflowError:
        raise CalcError("the result is too large") from None
    except (ValueError, TypeError) as exc:
        if isinstance(exc, CalcError):
            raise
        raise CalcError(f"math error: {exc}") from None


def format_value(value: int | float) -> str:
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 1e16:
            return str(int(value))
        return repr(value)
    return str(value)


def _check(value: object) -> int | float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise CalcError("only numbers can be computed")
    if isinstance(value, int) and value.bit_length() > MAX_INT_BITS:
        raise CalcError(f"the result has more than {MAX_INT_BITS * 30103 // 100000} digits")
    return value


def _eval(node: ast.AST) -> int | float:
    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
            raise CalcError(f"{node.value!r} is not a number")
        return _check(node.value)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _check(_UNARY[type(node.op)](_eval(node.operand)))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow):
            _check_power(left, right)
        if isinstance(node.op, ast.Mult) and isinstance(left, int) and isinstance(right, int):
            if left.bit_length() + right.bit_length() > MAX_INT_BITS + 1:
                raise CalcError("the result is too large")
        return _check(_BINARY[type(node.op)](left, right))
    if isinstance(node, ast.Name):
        if node.id in CONSTANTS:
            return CONSTANTS[node.id]
        raise CalcError(f"unknown name {node.id!r}; known constants: {', '.join(CONSTANTS)}")
    if isinstance(node, ast.Call):
        if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS:
            what = node.func.id if isinstance(node.func, ast.Name) else ast.unparse(node.func)
            raise CalcError(f"unknown function {what!r}; known: {', '.join(FUNCTIONS)}")
        if node.keywords:
            raise CalcError("functions take plain arguments, not name=value")
        args = [_eval(a) for a in node.args]
        try:
            return _check(FUNCTIONS[node.func.id](*args))
        except TypeError:
            raise CalcError(f"{node.func.id} does not take {len(args)} argument(s)") from None
    if isinstance(node, ast.BinOp):
        raise CalcError(f"the operator {type(node.op).__name__} is not supported")
    raise CalcError(f"{ast.unparse(node)!r} is not arithmetic")


def _check_power(base: int | float, exponent: int | float) -> None:
    if isinstance(base, int) and isinstance(exponent, int):
        if exponent < 0 or abs(base) <= 1:
            if exponent < -MAX_INT_BITS:
                raise CalcError("the exponent is too large")
            return
        if exponent * math.log2(abs(base)) > MAX_INT_BITS:
            raise CalcError(f"{base} ** {exponent} is too large (over {MAX_INT_BITS} bits)")
        return
    if abs(exponent) > 1e6 and abs(base) not in (0, 1):
        # floats overflow (an error) or underflow to 0; either way there is nothing to compute
        if (abs(base) > 1) == (exponent > 0):
            raise CalcError("the result is too large")
