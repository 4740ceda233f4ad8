"""`wren completion bash|zsh|fish`: valid scripts, made from the parser, that complete."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from wren.engine.terminal.completion import SHELLS, script, tree
from wren.engine.terminal.main import build_parser

PARSER = build_parser(extensions=True)
ROOT = tree(PARSER)


def _need(shell: str) -> str:
    path = shutil.which(shell)
    if path is None:
        pytest.skip(f"{shell} is not installed (tests/system/packages.txt lists it)")
    return path


def _write(tmp_path, shell: str) -> str:
    path = tmp_path / f"wren.{shell}"
    path.write_text(script(shell, PARSER), encoding="utf-8")
    return str(path)


def test_the_tree_has_every_command_and_the_extensions():
    top = set(ROOT.subcommands)
    assert {"chat", "ask", "models", "conversations", "completion"} <= top
    assert {"memories", "scan"} <= top  # the extensions' subcommands
    assert set(ROOT.subcommands["models"].subcommands) >= {"list", "import", "pull", "rm", "info"}
    ask = {flag: o for o in ROOT.subcommands["ask"].options for flag in o.flags}
    assert ask["--backend"].choices and ask["--file"].files and not ask["--json"].takes_value
    assert "--no-save" in ask


@pytest.mark.parametrize("shell", SHELLS)
def test_every_script_names_every_subcommand(shell):
    text = script(shell, PARSER)
    for name in ROOT.subcommands:
        assert name in text
    for name in ROOT.subcommands["models"].subcommands:
        assert name in text


def test_bash_script_is_valid_and_completes(tmp_path):
    bash = _need("bash")
    path = _write(tmp_path, "bash")
    subprocess.run([bash, "-n", path], check=True)
    probe = f"""
source {path}
comp() {{ COMP_WORDS=("$@"); COMP_CWORD=$((${{#COMP_WORDS[@]}}-1)); COMPREPLY=(); _wren; echo "${{COMPREPLY[*]}}"; }}
comp wren ""
comp wren mo
comp wren models ""
comp wren models import --
comp wren ask --backend ""
comp wren ask --model x --fi
comp wren conversations ""
"""
    lines = subprocess.run([bash, "-c", probe], capture_output=True, text=True, check=True).stdout.splitlines()
    assert set(lines[0].split()) == set(ROOT.subcommands)
    assert lines[1] == "models"
    assert lines[2].split() == ["list", "import", "pull", "rm", "info"]
    assert set(lines[3].split()) == {"--help", "--name"}
    assert lines[4].split() == ["auto", "torch", "torch-cpu", "torch-cuda", "mlx"]
    assert lines[5] == "--file"
    assert lines[6].split() == ["list", "show", "export"]


def test_zsh_script_is_valid(tmp_path):
    zsh = _need("zsh")
    path = _write(tmp_path, "zsh")
    subprocess.run([zsh, "-n", path], check=True)
    # Its walk over the words (which command, which option's value) reads the same in zsh.
    probe = f"""
compdef() {{ : }}
source {path}
_wren_walk models import --name; print -r -- "$_wren_path|$_wren_value"
_wren_walk ask --model x; print -r -- "$_wren_path|$_wren_value"
_wren_describe models; print -r -- ${{reply[1]}}
"""
    env = dict(os.environ, ZDOTDIR=str(tmp_path))
    out = subprocess.run([zsh, "-f", "-c", probe], capture_output=True, text=True, check=True, env=env).stdout
    assert out.splitlines()[:2] == ["models import|--name", "ask|"]
    assert out.splitlines()[2].startswith("list:")


def test_fish_script_is_valid_and_completes(tmp_path):
    fish = _need("fish")
    path = _write(tmp_path, "fish")
    subprocess.run([fish, "--no-execute", path], check=True)
    env = dict(os.environ, XDG_CONFIG_HOME=str(tmp_path / "config"), XDG_DATA_HOME=str(tmp_path / "data"))

    def complete(line: str) -> list[str]:
        out = subprocess.run([fish, "--no-config", "-c", f"source {path}; complete -C {line!r}"],
                             capture_output=True, text=True, check=True, env=env).stdout
        return [row.split("\t")[0] for row in out.splitlines()]

    assert set(complete("wren ")) == set(ROOT.subcommands)
    assert complete("wren models i") == ["import", "info"]
    assert complete("wren ask --backend ") == sorted(["auto", "torch", "torch-cpu", "torch-cuda", "mlx"])
    assert "--no-save" in complete("wren ask --")


def test_the_command_prints_a_script(capsys):
    from wren.engine.terminal.main import main

    assert main(["completion", "bash"]) == 0
    assert "complete -o default -o bashdefault -F _wren wren" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["completion", "tcsh"])
    assert "invalid choice: 'tcsh'" in capsys.readouterr().err
