"""Fixtures shared by the unit tests."""

import pytest

from strandline.runtime.disk import OsDisk
from strandline.sim.disk import MemoryDisk


@pytest.fixture(params=["memory", "os"])
def disk_root(request, tmp_path):
    """The same test on the simulator's in-memory disk and on the real one."""
    if request.param == "memory":
        disk = MemoryDisk(strict_dirs=True)
        disk.makedirs("/data")
        return disk, "/data"
    return OsDisk(), str(tmp_path)
