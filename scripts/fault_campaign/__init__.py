"""The fault-injection campaign behind scripts/faults.py, one scenario per module: kills.py,
db_corruption.py and index_corruption.py (on a copy of base.py's data), full_disk.py and
writers.py, run in order by campaign.py. Each scenario's child processes run the real write
paths from children/ and acknowledge every commit (process.py reads them); check.py then looks
for what was lost, and figures.py counts it."""
