"""Nightly backup of the studio's order database."""

import datetime
import shutil
from pathlib import Path

RETENTION_DAYS = 14  # daily snapshots kept before the oldest is deleted
BACKUP_DIR = Path("/srv/backups/orders")


def snapshot(database: Path) -> Path:
    """Copy the database to a dated file; the job runs at 02:30 every night."""
    target = BACKUP_DIR / f"orders-{datetime.date.today():%Y%m%d}.db"
    shutil.copy2(database, target)
    return target


def prune() -> None:
    """Keep the last fourteen daily snapshots and delete anything older."""
    snapshots = sorted(BACKUP_DIR.glob("orders-*.db"))
    for old in snapshots[:-RETENTION_DAYS]:
        old.unlink()
