"""Projects: a name, instructions, a set of library sources and the chats in it. A chat in a
project searches that project's sources; outside any project the library setting decides
(`library.scope`: "all" searches every source, "none" none). Database calls go through
`run_db` as in `LibraryIndex`."""

from __future__ import annotations

import builtins
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidRequest, NotFound
from ..records import check_unicode
from ..store import library as sql
from .indexer import RunDb

SCOPE_SETTING = "library.scope"
SCOPES = ("all", "none")
DEFAULT_SCOPE = "all"
MAX_NAME = 80


@dataclass(frozen=True)
class Scope:
    """What one Send searches: nothing, every source (`source_ids` None) or some; and the
    project's instructions, if the chat is in one."""

    search: bool
    source_ids: tuple[int, ...] | None = None
    project: str | None = None
    instructions: str = ""


NO_DOCUMENTS = Scope(False)


class Projects:
    def __init__(self, run_db: RunDb):
        self.run_db = run_db

    def create(self, name: str, instructions: str = "") -> dict[str, Any]:
        name = check_unicode(name, "the project's name").strip()
        if not name or len(name) > MAX_NAME:
            raise InvalidRequest(f"a project's name must be 1 to {MAX_NAME} characters; nothing was made")
        if self.run_db(lambda db: sql.project_named(db, name)):
            raise InvalidRequest(f"a project named {name!r} exists already")
        return self.run_db(lambda db: sql.add_project(db, name, check_unicode(instructions, "the instructions")))

    def get(self, name: str) -> dict[str, Any]:
        found = self.run_db(lambda db: sql.project_named(db, name))
        if found is None:
            names = ", ".join(p["name"] for p in self.run_db(sql.projects)) or "none yet"
            raise NotFound(f"no project named {name!r} (projects: {names})")
        return found

    def list(self) -> builtins.list[dict[str, Any]]:
        def read(db) -> builtins.list[dict[str, Any]]:
            out = []
            for project in sql.projects(db):
                project["source_ids"] = sql.project_sources(db, project["id"])
                project["chats"] = sql.chats_of_project(db, project["id"])
                out.append(project)
            return out

        return self.run_db(read)

    def remove(self, name: str) -> dict[str, Any]:
        """The project goes; its chats and the library's files stay (the chats leave it)."""
        project = self.get(name)
        self.run_db(lambda db: sql.delete_project(db, project["id"]))
        return project

    def set_instructions(self, name: str, text: str) -> dict[str, Any]:
        project = self.get(name)
        self.run_db(lambda db: sql.set_instructions(db, project["id"], check_unicode(text, "the instructions")))
        return self.get(name)

    def add_sources(self, name: str, source_ids: builtins.list[int]) -> dict[str, Any]:
        project = self.get(name)
        self.run_db(lambda db: sql.add_project_sources(db, project["id"], source_ids))
        return project

    def add_chat(self, name: str, conversation_id: int) -> None:
        project = self.get(name)
        self.run_db(lambda db: sql.set_chat_project(db, conversation_id, project["id"]))

    def scope(self, conversation_id: int | None, project: str | None, library_on: bool | None,
              setting: str) -> Scope:
        """What a Send searches: `project` (by name) or the chat's project first, then the
        library setting; `library_on` (--docs/--no-docs) overrides the setting either way."""
        if library_on is False:
            return NO_DOCUMENTS
        chosen = self.get(project) if project else self._project_of(conversation_id)
        if chosen is not None:
            ids = tuple(self.run_db(lambda db: sql.project_sources(db, chosen["id"])))
            return Scope(True, ids, chosen["name"], chosen["instructions"])
        if library_on or setting == "all":
            return Scope(True)
        return NO_DOCUMENTS

    def _project_of(self, conversation_id: int | None) -> dict[str, Any] | None:
        if conversation_id is None:
            return None

        def read(db) -> dict[str, Any] | None:
            pid = sql.project_of_chat(db, conversation_id)
            return next((p for p in sql.projects(db) if p["id"] == pid), None) if pid else None

        return self.run_db(read)
