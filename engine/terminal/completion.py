"""`wren completion bash|zsh|fish`: shell completion scripts, generated from the parser.

Everything the parser knows is offered: subcommands at every level (the extensions' too),
each command's options, the choices of an option or a positional argument, and file names
where an argument is a path. The scripts hold the command tree as data (one `case` or
`switch` per question), so they stay small and never run `wren` while completing.

    wren completion bash > ~/.local/share/bash-completion/completions/wren
    wren completion zsh  > "${fpath[1]}/_wren"
    wren completion fish > ~/.config/fish/completions/wren.fish
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

SHELLS = ("bash", "zsh", "fish")
FILES = "@files"  # an argument that takes a path: the shell completes file names


@dataclass
class Option:
    flags: list[str]
    help: str
    takes_value: bool
    choices: list[str] = field(default_factory=list)
    files: bool = False


@dataclass
class Node:
    """One command level: `wren`, `wren models`, `wren models import`, …"""

    path: str
    help: str = ""
    options: list[Option] = field(default_factory=list)
    subcommands: dict[str, Node] = field(default_factory=dict)
    words: list[str] = field(default_factory=list)  # choices of positional arguments
    files: bool = False  # a positional argument takes a path


def _help(action: argparse.Action) -> str:
    text = action.help or ""
    if text == argparse.SUPPRESS:
        return ""
    try:
        text = text % {"default": action.default, "prog": "wren"}
    except (TypeError, ValueError, KeyError):
        pass
    return " ".join(text.split())


def _is_path(action: argparse.Action) -> bool:
    names = [action.dest, *(s.lstrip("-") for s in action.option_strings)]
    return any(n in ("path", "file", "files", "folder", "dir", "directory") or n.endswith("_path") for n in names)


def tree(parser: argparse.ArgumentParser, path: str = "", help: str = "") -> Node:
    """The parser's commands, options and choices, level by level."""
    node = Node(path, help)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: _help(a) for a in action._choices_actions}
            for name, sub in action.choices.items():
                if name in node.subcommands:
                    continue
                node.subcommands[name] = tree(sub, f"{path} {name}".strip(), helps.get(name, ""))
        elif action.option_strings:
            if _help(action) == "" and action.help == argparse.SUPPRESS:
                continue
            takes = action.nargs != 0
            choices = [str(c) for c in action.choices] if takes and action.choices else []
            node.options.append(Option(list(action.option_strings), _help(action), takes, choices,
                                       takes and not choices and _is_path(action)))
        else:
            if action.choices:
                node.words.extend(str(c) for c in action.choices)
            elif _is_path(action):
                node.files = True
    return node


def _nodes(root: Node) -> list[Node]:
    out, stack = [], [root]
    while stack:
        node = stack.pop(0)
        out.append(node)
        stack.extend(node.subcommands.values())
    return out


def _valued(node: Node) -> list[str]:
    return [flag for o in node.options if o.takes_value for flag in o.flags]


def script(shell: str, parser: argparse.ArgumentParser) -> str:
    if shell not in SHELLS:
        raise ValueError(f"no completion for {shell!r}; choose one of {', '.join(SHELLS)}")
    root = tree(parser)
    return {"bash": _bash, "zsh": _zsh, "fish": _fish}[shell](root)


# -- quoting --------------------------------------------------------------------------------

def _sq(text: str) -> str:
    """Single-quoted for bash and zsh."""
    return "'" + text.replace("'", "'\\''") + "'"


def _fq(text: str) -> str:
    """Single-quoted for fish."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _case_arm(key: str, value: str) -> str:
    return f"        {_sq(key)}) printf '%s\\n' {_sq(value)} ;;"


# -- bash -----------------------------------------------------------------------------------

def _bash_tables(root: Node) -> list[str]:
    nodes = _nodes(root)
    lines = ["# The command tree: subcommands, options, options that take a value, and words."]
    for fn, get in (
        ("subs", lambda n: " ".join(n.subcommands)),
        ("opts", lambda n: " ".join(flag for o in n.options for flag in o.flags)),
        ("valued", lambda n: " ".join(_valued(n))),
        ("words", lambda n: " ".join(n.words) + (f" {FILES}" if n.files else "")),
    ):
        lines.append(f"_wren_{fn}() {{")
        lines.append('    case "$1" in')
        lines.extend(_case_arm(n.path, get(n)) for n in nodes if get(n).strip())
        lines.append("    esac")
        lines.append("}")
    lines.append("_wren_choices() {")
    lines.append('    case "$1|$2" in')
    for n in nodes:
        for o in n.options:
            if o.takes_value and (o.choices or o.files):
                value = " ".join(o.choices) if o.choices else FILES
                lines.extend(_case_arm(f"{n.path}|{flag}", value) for flag in o.flags)
    lines.append("    esac")
    lines.append("}")
    return lines


_SHELL_WALK = r"""
# (bash and zsh alike.) Sets _wren_path to the subcommands typed so far and _wren_value to the option whose
# value is being typed (empty when none); words are those before the cursor.
_wren_walk() {
    local w skip=""
    _wren_path=""
    _wren_value=""
    for w in "$@"; do
        if [[ -n $skip ]]; then skip=""; continue; fi
        if [[ $w == -* ]]; then
            [[ $w == *=* ]] && continue
            if [[ " $(_wren_valued "$_wren_path") " == *" $w "* ]]; then skip=$w; fi
            continue
        fi
        if [[ " $(_wren_subs "$_wren_path") " == *" $w "* ]]; then
            _wren_path="${_wren_path:+$_wren_path }$w"
        fi
    done
    _wren_value=$skip
}
"""


def _bash(root: Node) -> str:
    body = r"""
_wren() {
    local cur="${COMP_WORDS[COMP_CWORD]}" candidates
    _wren_walk "${COMP_WORDS[@]:1:COMP_CWORD-1}"
    COMPREPLY=()
    if [[ -n $_wren_value ]]; then
        candidates=$(_wren_choices "$_wren_path" "$_wren_value")
        if [[ $candidates == @files ]]; then
            COMPREPLY=($(compgen -f -- "$cur"))
        elif [[ -n $candidates ]]; then
            COMPREPLY=($(compgen -W "$candidates" -- "$cur"))
        fi
        return 0
    fi
    if [[ $cur == -* ]]; then
        COMPREPLY=($(compgen -W "$(_wren_opts "$_wren_path")" -- "$cur"))
        return 0
    fi
    candidates="$(_wren_subs "$_wren_path") $(_wren_words "$_wren_path")"
    if [[ " $candidates " == *" @files "* ]]; then
        COMPREPLY=($(compgen -f -- "$cur"))
    fi
    COMPREPLY+=($(compgen -W "${candidates//@files/}" -- "$cur"))
    return 0
}
complete -o default -o bashdefault -F _wren wren
"""
    head = ["# bash completion for wren (generated by `wren completion bash`)"]
    return "\n".join(head + _bash_tables(root)) + "\n" + _SHELL_WALK + body


# -- zsh ------------------------------------------------------------------------------------

def _zsh_entry(name: str, help: str) -> str:
    return name.replace(":", "\\:") + ":" + help


def _zsh(root: Node) -> str:
    nodes = _nodes(root)
    lines = ["#compdef wren", "# zsh completion for wren (generated by `wren completion zsh`)", ""]
    lines += _bash_tables(root)  # the same tables: plain functions read the same in zsh
    lines.append("_wren_describe() {  # subcommands with their help, for _describe")
    lines.append('    case "$1" in')
    for n in nodes:
        if n.subcommands:
            entries = " ".join(_sq(_zsh_entry(name, sub.help)) for name, sub in n.subcommands.items())
            lines.append(f"        {_sq(n.path)}) reply=({entries}) ;;")
    lines.append("        *) reply=() ;;")
    lines.append("    esac")
    lines.append("}")
    lines.append("_wren_optdescribe() {  # options with their help")
    lines.append('    case "$1" in')
    for n in nodes:
        entries = " ".join(_sq(_zsh_entry(flag, o.help)) for o in n.options for flag in o.flags)
        if entries:
            lines.append(f"        {_sq(n.path)}) reply=({entries}) ;;")
    lines.append("        *) reply=() ;;")
    lines.append("    esac")
    lines.append("}")
    body = _SHELL_WALK + r"""
_wren() {
    local _wren_path _wren_value candidates
    local -a reply choices
    _wren_walk "${(@)words[2,CURRENT-1]}"
    if [[ -n $_wren_value ]]; then
        candidates=$(_wren_choices "$_wren_path" "$_wren_value")
        if [[ $candidates == @files ]]; then
            _files
        elif [[ -n $candidates ]]; then
            choices=(${=candidates})
            compadd -a choices
        fi
        return 0
    fi
    if [[ $PREFIX == -* ]]; then
        _wren_optdescribe "$_wren_path"
        _describe -t options option reply
        return 0
    fi
    _wren_describe "$_wren_path"
    (( ${#reply} )) && _describe -t commands command reply
    candidates=$(_wren_words "$_wren_path")
    if [[ " $candidates " == *" @files "* ]]; then
        _files
        candidates=${candidates//@files/}
    fi
    choices=(${=candidates})
    (( ${#choices} )) && compadd -a choices
    return 0
}

if [[ $zsh_eval_context[-1] == loadautofunc ]]; then
    _wren "$@"
else
    compdef _wren wren
fi
"""
    return "\n".join(lines) + "\n" + body


# -- fish -----------------------------------------------------------------------------------

def _fish(root: Node) -> str:
    nodes = _nodes(root)
    out = [
        "# fish completion for wren (generated by `wren completion fish`)",
        "function __wren_subs",
        "    switch $argv[1]",
    ]
    for n in nodes:
        if n.subcommands:
            out.append(f"        case {_fq(n.path)}")
            out.append(f"            echo {' '.join(_fq(s) for s in n.subcommands)}")
    out += ["    end", "end", "", "function __wren_valued", "    switch $argv[1]"]
    for n in nodes:
        if _valued(n):
            out.append(f"        case {_fq(n.path)}")
            out.append(f"            echo {' '.join(_fq(f) for f in _valued(n))}")
    out += ["    end", "end", ""]
    out.append(r"""# The subcommands typed so far, joined by spaces ("" at the top).
function __wren_path
    set -l words (commandline -opc)
    set -e words[1]
    set -l path ""
    set -l skip 0
    for w in $words
        if test $skip = 1
            set skip 0
            continue
        end
        if string match -q -- '-*' $w
            if not string match -q -- '*=*' $w
                and contains -- $w (string split ' ' -- (__wren_valued $path))
                set skip 1
            end
            continue
        end
        if contains -- $w (string split ' ' -- (__wren_subs $path))
            set path (string trim -- "$path $w")
        end
    end
    echo $path
end

function __wren_at
    test (__wren_path) = "$argv[1]"
end
""")
    out.append("complete -c wren -f")
    for n in nodes:
        out += _fish_completes(n)
    return "\n".join(out) + "\n"


def _fish_completes(n: Node) -> list[str]:
    """The `complete` lines for one subcommand: its subcommands, words, files and options."""
    at = f"-n {_fq('__wren_at ' + _fq(n.path))}"
    out = [f"complete -c wren {at} -a {_fq(name)} -d {_fq(sub.help)}" for name, sub in n.subcommands.items()]
    if n.words:
        out.append(f"complete -c wren {at} -a {_fq(' '.join(n.words))}")
    if n.files:
        out.append(f"complete -c wren {at} -F")
    out += [" ".join(["complete -c wren", at, *_fish_option(o)]) for o in n.options]
    return out


def _fish_option(o: Option) -> list[str]:
    """An option's flags, its value (choices, files or any) and its help, as `complete` arguments."""
    parts: list[str] = []
    for flag in o.flags:
        if flag.startswith("--"):
            parts.append(f"-l {_fq(flag[2:])}")
        elif len(flag) == 2:
            parts.append(f"-s {_fq(flag[1:])}")
        else:
            parts.append(f"-o {_fq(flag[1:])}")
    if o.takes_value:  # -x: a value, and no file names unless they are wanted
        if o.choices:
            parts.append(f"-x -a {_fq(' '.join(o.choices))}")
        else:
            parts.append("-r -F" if o.files else "-x")
    if o.help:
        parts.append(f"-d {_fq(o.help)}")
    return parts


def register(sub) -> None:
    p = sub.add_parser("completion", help="print a shell completion script (bash, zsh or fish)",
                       description=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("shell", choices=SHELLS)
    p.set_defaults(func=_cmd_completion)


def _cmd_completion(args) -> int:
    import sys

    from .main import build_parser

    sys.stdout.write(script(args.shell, build_parser(extensions=True)))
    return 0
