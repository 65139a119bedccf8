"""Fuzz targets (hypothesis): bad input never crashes a parser (docs/fuzzing.md)."""
