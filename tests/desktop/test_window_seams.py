"""The window's seams (docs/architecture.md, "Seams"; desktop/window/seams.py): the
controllers are built with what they drive, each typed by a small protocol, never with the
whole MainWindow; they reach nothing of a collaborator beyond what its protocol declares;
MainWindow gives them objects that have every declared member; and a controller runs over
small fakes."""

from __future__ import annotations

import ast
import asyncio
import inspect
import typing
from pathlib import Path
from types import SimpleNamespace

import pytest
from PySide6.QtCore import SignalInstance

from wren.desktop.window import seams
from wren.desktop.window.chat_settings import open_chat_settings
from wren.desktop.window.context import ContextController
from wren.desktop.window.conversation import ConversationController
from wren.desktop.window.live_answer import LiveAnswers
from wren.desktop.window.models import ModelController
from wren.desktop.window.probabilities import TokenProbabilities
from wren.desktop.window.tool_choice import ToolChoice

ROOT = Path(__file__).resolve().parents[2]
WINDOW = ROOT / "desktop" / "window"
# Each controller (or the function standing for one) and the module it lives in.
CONTROLLERS = {
    ConversationController: WINDOW / "conversation.py",
    LiveAnswers: WINDOW / "live_answer.py",
    ContextController: WINDOW / "context.py",
    ModelController: WINDOW / "models.py",
    ToolChoice: WINDOW / "tool_choice.py",
    TokenProbabilities: WINDOW / "probabilities.py",
    open_chat_settings: WINDOW / "chat_settings.py",
}


def _members(protocol: type) -> set[str]:
    """The members a protocol declares: its annotated attributes, methods and properties."""
    names = set(vars(protocol).get("__annotations__", {}))
    names |= {n for n, v in vars(protocol).items() if callable(v) or isinstance(v, property)}
    return {n for n in names if not n.startswith("_")}


def _signals(protocol: type) -> set[str]:
    return {n for n, t in typing.get_type_hints(protocol).items() if t is SignalInstance}


def _seams_of(controller) -> dict[str, type]:
    """The constructor's (or function's) parameters typed by a protocol of seams.py."""
    func = controller.__init__ if inspect.isclass(controller) else controller
    hints = typing.get_type_hints(func)
    return {name: hint for name, hint in hints.items()
            if getattr(hint, "__module__", "") == seams.__name__ and getattr(hint, "_is_protocol", False)}


def _reaches(path: Path, params: set[str]) -> dict[str, set[str]]:
    """`self.<p>.<x>` anywhere in the module and `<p>.<x>` for a bare parameter name inside a
    function that takes `p`: what the module uses of each collaborator."""
    found: dict[str, set[str]] = {p: set() for p in params}
    tree = ast.parse(path.read_text("utf-8"))
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute)
                and isinstance(node.value.value, ast.Name) and node.value.value.id == "self"
                and node.value.attr in params):
            found[node.value.attr].add(node.attr)
    for func in ast.walk(tree):
        if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        taken = {a.arg for a in func.args.args + func.args.kwonlyargs} & params
        for node in ast.walk(func):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in taken:
                found[node.value.id].add(node.attr)
    return found


def _window_reaches(path: Path) -> list[str]:
    """Any hold on the whole window: `self.w`, a `window` name, or MainWindow named at all."""
    found = []
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.Attribute) and node.attr == "w" and isinstance(node.value, ast.Name) \
                and node.value.id == "self":
            found.append(f"{path.name}:{node.lineno} self.w")
        elif isinstance(node, ast.Name) and node.id in ("window", "MainWindow"):
            found.append(f"{path.name}:{node.lineno} {node.id}")
        elif isinstance(node, ast.arg) and node.arg == "window":
            found.append(f"{path.name}:{node.lineno} parameter window")
        elif isinstance(node, ast.ImportFrom) and node.module == "wren.desktop.window.main_window":
            found.append(f"{path.name}:{node.lineno} imports main_window")
    return found


@pytest.mark.parametrize("controller", list(CONTROLLERS), ids=lambda c: c.__name__)
def test_no_controller_holds_the_window(controller):
    assert _window_reaches(CONTROLLERS[controller]) == []


@pytest.mark.parametrize("controller", list(CONTROLLERS), ids=lambda c: c.__name__)
def test_a_controller_uses_only_what_its_seams_declare(controller):
    wanted = _seams_of(controller)
    assert wanted, f"{controller.__name__} takes no collaborator typed by desktop/window/seams.py"
    used = _reaches(CONTROLLERS[controller], set(wanted))
    undeclared = {p: sorted(used[p] - _members(proto)) for p, proto in wanted.items() if used[p] - _members(proto)}
    assert undeclared == {}
    # Every collaborator it is given is used: a protocol names what is needed, no more.
    unused = sorted(p for p in wanted if not used[p])
    assert unused == []


def test_the_checks_catch_a_reach_past_the_seam(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text(
        "class C:\n"
        "    def __init__(self, chat, window):\n"
        "        self.chat = chat\n"
        "        chat.secret.connect(print)\n"
        "        self.w = window\n"
        "    def f(self):\n"
        "        self.chat.clear()\n"
        "        self.chat.internals.hide()\n"
        "        self.w.status.showMessage('x')\n"
    )
    assert _reaches(sample, {"chat"}) == {"chat": {"secret", "clear", "internals"}}
    assert _window_reaches(sample) == [
        "sample.py:2 parameter window", "sample.py:5 self.w", "sample.py:5 window", "sample.py:9 self.w"]


def test_the_main_window_gives_every_controller_what_its_seams_declare(open_window):
    window = open_window()
    controllers = {ConversationController: window.conversations, ContextController: window.context,
                   ModelController: window.models, ToolChoice: window.conversations.tool_choice,
                   TokenProbabilities: window.conversations.probabilities}
    for klass, controller in controllers.items():
        for param, protocol in _seams_of(klass).items():
            given = getattr(controller, param)
            missing = sorted(m for m in _members(protocol) if not hasattr(given, m))
            assert missing == [], f"{klass.__name__}.{param} ({type(given).__name__}) lacks {missing}"
            for name in _signals(protocol):
                assert isinstance(getattr(given, name), SignalInstance), f"{klass.__name__}.{param}.{name}"
    assert window.conversations.frame is window
    assert window.conversations.chat is window.chat and window.context.chat is window.chat
    assert window.models.picker is window.model_picker
    # The chat settings panel's collaborators, as the header's button passes them.
    for protocol, given in ((seams.OpenChat, window.conversations), (seams.StatusLine, window.status),
                            (seams.TaskRunner, window.tasks)):
        assert sorted(m for m in _members(protocol) if not hasattr(given, m)) == []


# -- the conversation controller over fakes ---------------------------------------------


class FakeSignal:
    def __init__(self):
        self.slots = []

    def connect(self, slot):
        self.slots.append(slot)

    def emit(self, *args):
        for slot in self.slots:
            slot(*args)


class Fake:
    """A collaborator with exactly the protocol's members: each call is recorded in `calls`
    (shared by all fakes, in order); anything the protocol does not declare is an error."""

    def __init__(self, protocol: type, calls: list, returns: dict | None = None):
        self._name = protocol.__name__
        self._members = _members(protocol)
        self._calls = calls
        self._returns = returns or {}
        for name in _signals(protocol):
            setattr(self, name, FakeSignal())

    def __getattr__(self, name):
        if name.startswith("_") or name not in self._members:
            raise AttributeError(f"{self._name} declares no {name!r}")
        if name in self._returns:  # a value, or a stand-in that records itself
            return self._returns[name]

        def record(*args, **kwargs):
            self._calls.append((self._name, name, args))

        return record


class FakeEngine:
    """The engine's services the controller uses here: conversations and tools."""

    def __init__(self):
        self.approved = []
        self.listed = []
        self.conversations = SimpleNamespace(rename=self._rename, list=self._list)
        self.tools = SimpleNamespace(approve=self._approve)

    async def _rename(self, conversation_id, title):
        return SimpleNamespace(id=conversation_id, title=title.strip())

    async def _list(self, query=None):
        self.listed.append(query)
        return [SimpleNamespace(id=7, title="Birds")]

    def _approve(self, call_id, decision):
        self.approved.append((call_id, decision))


@pytest.fixture
def fake_controller(qapp):
    calls: list = []
    engine = FakeEngine()

    def run(coro, on_result=None, *, what=""):
        calls.append(("TaskRunner", "run", (what,)))
        coro.close()  # recorded, not run: these tests drive one action at a time

    kinds = dict(chat=seams.AnswerView, composer=seams.Draft, tools=seams.ToolMenu, attachments=seams.Attachments,
                 sidebar=seams.ChatList, status=seams.StatusLine, counter=seams.UsageMeter, frame=seams.ChatFrame)
    fakes = {k: Fake(p, calls) for k, p in kinds.items()}
    fakes["sidebar"] = Fake(seams.ChatList, calls, {"query": lambda: ""})

    def returning(protocol: str, name: str, value):
        def call(*args):
            calls.append((protocol, name, args))
            return value
        return call

    fakes["composer"] = Fake(seams.Draft, calls, {"take_draft": returning("Draft", "take_draft", ("", ()))})
    fakes["attachments"] = Fake(seams.Attachments, calls, {"take": returning("Attachments", "take", [])})
    fakes["tasks"] = Fake(seams.TaskRunner, calls, {"run": run})
    controller = ConversationController(engine, **fakes)
    return controller, engine, fakes, calls


def test_new_chat_over_fakes_clears_the_view_and_says_nothing_stale(fake_controller):
    controller, _engine, _fakes, calls = fake_controller
    controller.current_id = 3
    controller.new_chat()
    assert controller.current_id is None and controller.temporary is False
    assert calls == [
        ("Draft", "cancel_edit", ()),
        ("Draft", "take_draft", ()),  # chat 3's unsent message stays with chat 3 (empty here)
        ("Attachments", "take", ()),
        ("ChatFrame", "show_temporary", (False,)),
        ("AnswerView", "clear", ()),
        ("ChatFrame", "set_title", ("New chat",)),
        ("ChatList", "select", (None,)),
        ("Draft", "set_streaming", (False,)),
        ("AnswerView", "set_busy", (False,)),
        ("UsageMeter", "set_used", (0,)),
        ("StatusLine", "show_context", (None,)),
        ("StatusLine", "show_speed", (None, None)),
        ("ChatFrame", "focus_composer", ()),
        ("TaskRunner", "run", ("listing the tools",)),
    ]


def test_renaming_the_open_chat_over_fakes_retitles_and_relists_it(fake_controller):
    controller, engine, _fakes, calls = fake_controller
    controller.current_id = 7
    asyncio.run(controller.rename(7, " Birds "))
    assert engine.listed == [None]  # the sidebar's empty search lists every chat
    assert calls == [
        ("ChatFrame", "set_title", ("Birds",)),
        ("ChatList", "set_conversations", ([SimpleNamespace(id=7, title="Birds")], 7)),
    ]


def test_a_tool_decision_in_the_fake_chat_reaches_the_engine(fake_controller):
    controller, engine, fakes, calls = fake_controller
    fakes["chat"].tool_decided.emit("call-1", "once")
    assert engine.approved == [("call-1", "once")]
    assert calls == [("StatusLine", "clearMessage", ())]


def test_a_fake_refuses_what_its_protocol_does_not_declare(fake_controller):
    _controller, _engine, fakes, _calls = fake_controller
    with pytest.raises(AttributeError, match="AnswerView declares no 'tool_cancel'"):
        _ = fakes["chat"].tool_cancel
