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

        page.list.setCurrentRow(0)
        arun(page.test())
        assert "works" in page.status.text() and "Hello from the remote side." in page.status.text()
        arun(page.remove())
        assert page.list.count() == 0
        assert "fake/fake-chat" not in arun(window.models.refresh())
    finally:
        server.stop()
