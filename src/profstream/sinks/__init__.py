"""Sinks: chrome-trace JSON, CSV, summary JSON and Parquet writers.

They arrive with the export capability; ``profstream export`` says "not implemented yet" until then.
"""
