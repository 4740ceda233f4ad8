"""Settings → Providers: add a provider against a fake OpenAI-compatible server on
127.0.0.1, see its models in the window's picker beside the local one, test and remove it;
a bad URL is refused on the page with the reason."""

from __future__ import annotations

from tests.engine.providers.fakeserver import FakeServer
from wren.desktop.settings.dialog import SettingsDialog


def test_providers_page_adds_tests_and_removes(open_window, arun, qtbot):
    server = FakeServer().start()
    try:
        window = open_window()
        dialog = SettingsDialog(window.engine, window.tasks, hotkey_problem="not here", parent=window)
        page = dialog.providers_page
        assert dialog.pages.indexOf(page) >= 0
        arun(page.load())
        page.name_edit.setText("far")
        page.url_edit.setText("http://10.9.8.7:8000/v1")
        page.store_picker.setCurrentIndex(page.store_picker.findData("none"))
        assert arun(page.add()) is None
        assert "plain http:// to another machine" in page.status.text()

        page.name_edit.setText("fake")
        page.url_edit.setText(server.base_url)
        info = arun(page.add())
        assert info is not None and info.models == ("fake-chat",)
        assert page.list.count() == 1 and "fake" in page.list.item(0).text()
        names = arun(window.models.refresh())
        assert "tiny" in names and "fake/fake-chat" in names  # the window's picker lists both

        assert page.list.currentRow() == 0  # the provider just added is the one Test tries
        arun(page.test())
        assert "works" in page.status.text() and "Hello from the remote side." in page.status.text()
        arun(page.remove())
        assert page.list.count() == 0
        assert "fake/fake-chat" not in arun(window.models.refresh())
    finally:
        server.stop()


def test_the_page_says_it_is_working_and_holds_its_buttons_while_the_server_is_asked(open_window, arun, monkeypatch):
    window = open_window()
    dialog = SettingsDialog(window.engine, window.tasks, hotkey_problem="not here", parent=window)
    page = dialog.providers_page
    arun(page.load())
    seen = []
    real_add = window.engine.providers.add

    async def add(*args, **kwargs):  # what the page shows while the server is asked
        seen.append((page.status.text(), page.add_button.isEnabled(), page.test_button.isEnabled()))
        return await real_add(*args, **kwargs)

    monkeypatch.setattr(window.engine.providers, "add", add)
    page.name_edit.setText("lab")
    page.url_edit.setText("http://127.0.0.1:9/v1")
    page.http_box.setChecked(True)
    page.store_picker.setCurrentIndex(page.store_picker.findData("none"))
    page.model_edit.setText("m")  # a model named: nothing is asked of the (closed) port
    assert arun(page.add()) is not None
    assert seen == [("Adding the provider and asking it for its models…", False, False)]
    assert page.add_button.isEnabled() and page.test_button.isEnabled()  # given back


def test_a_provider_that_could_not_list_its_models_says_why_on_the_page(open_window, arun):
    window = open_window()
    dialog = SettingsDialog(window.engine, window.tasks, hotkey_problem="not here", parent=window)
    page = dialog.providers_page
    arun(page.load())
    page.name_edit.setText("down")
    page.url_edit.setText("http://127.0.0.1:9/v1")
    page.store_picker.setCurrentIndex(page.store_picker.findData("none"))
    assert arun(page.add()) is not None  # saved anyway
    said = page.status.text()
    assert said.startswith("Added down: no models known yet (it could not list them: ") and said.endswith("; press Test")
