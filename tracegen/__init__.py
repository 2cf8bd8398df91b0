"""Trace generation: import (convert), capture and synthesize Fastrack Parquet traces."""
