"""Results to people and files: terminal text, HTML, figures, JSON/CSV/Parquet."""
