"""What Wren's process connects to, and the offline lock: the audit-hook guard (guard.py),
the ledger it writes (ledger.py), why each connection is made (purpose.py), the lock
(lock.py), child processes without network (sandbox.py) and the privacy report (report.py)."""
