"""Reading a report: the nsys SQLite export into tables (report.py), fast paths (fastread.py), the Parquet cache."""
