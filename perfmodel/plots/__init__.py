"""Figures drawn from the result objects (matplotlib, no display needed)."""
