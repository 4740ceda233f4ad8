"""Sizes as people read them (engine/modelhub/sizing.py human_size): a model under a
megabyte is so many KB, never "0 MB"; the model hub's messages write sizes with it."""

from __future__ import annotations

import errno
import shutil
from pathlib import Path

import pytest

from wren.engine.errors import InvalidRequest
from wren.engine.modelhub import pull
from wren.engine.modelhub.sizing import human_size
from wren.engine.modelhub.validate import describe_os_error


@pytest.mark.parametrize(("n", "shown"), [
    (0, "0 bytes"), (1, "1 byte"), (999, "999 bytes"), (1000, "1 KB"), (237_000, "237 KB"), (237_499, "237 KB"),
    (999_499, "999 KB"), (999_960, "1.0 MB"),  # rounded up into the next unit, not "1,000 KB"
    (98_400_000, "98.4 MB"), (102_432_000, "102.4 MB"), (999_960_000, "1.0 GB"), (4_900_000_000, "4.9 GB"),
    (12_345_000_000_000, "12.3 TB"), (-5, "0 bytes"),
])
def test_sizes_read_as_people_write_them(n, shown):
    assert human_size(n) == shown


def test_a_full_disk_names_the_space_left_in_its_unit(tmp_path, monkeypatch):
    target = tmp_path / "models" / "new" / "model.gguf"
    monkeypatch.setattr(shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(10**9, 10**9 - 500_000, 500_000)
                        if Path(p) == tmp_path else (_ for _ in ()).throw(FileNotFoundError(p)))
    message = describe_os_error(OSError(errno.ENOSPC, "No space left on device"), target)
    assert message == f"the disk holding {target} is full (500 KB free)"  # was "0 MB free"


def test_too_little_disk_for_a_download_names_both_sizes(tmp_path, monkeypatch):
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(pull.shutil, "disk_usage", lambda path: usage._replace(free=237_000))
    with pytest.raises(InvalidRequest) as err:
        pull.check_disk_space(tmp_path, 4_900_000_000)
    assert "needs 4.9 GB free" in str(err.value) and "and 237 KB are free" in str(err.value)  # was "0.00 GB"
