"""The engine: discovery, metadata, clocks, stream readers, operators and layouts (see DESIGN.md)."""
